// Third-party browser scripts the Worker's pages load, copied from node_modules into the static
// assets so that a deployed page depends on no CDN. scripts/build-assets.mjs calls this.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

const modules = new URL("../node_modules/", import.meta.url).pathname;

/**
 * Each script: its package, whose package.json "browser" field names its single-file browser
 * build (the packages do not export that file), and the path it is served at.
 */
export const VENDOR_SCRIPTS = [
  // Scalar's standalone build, which defines window.Scalar: GET /docs loads it (src/api/docs.ts names the same path).
  { package: "@scalar/api-reference", to: "/vendor/scalar/standalone.js" },
];

/** Copies every vendor script under `out`; returns the paths written. */
export function copyVendorScripts(out) {
  return VENDOR_SCRIPTS.map(({ package: name, to }) => {
    const dir = `${modules}${name}/`;
    const { browser } = JSON.parse(readFileSync(`${dir}package.json`, "utf8"));
    const source = readFileSync(`${dir}${browser}`, "utf8");
    mkdirSync(dirname(`${out}${to}`), { recursive: true });
    // The source map is not shipped (it is four times the script): without this line a browser's
    // developer tools would ask for it and get a 404.
    writeFileSync(`${out}${to}`, source.replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n"));
    return `${out}${to}`;
  });
}
