#!/usr/bin/env node
// Builds the static assets the Worker serves through wrangler's [assets] (wrangler.toml) into
// dist/public: the dashboard (dashboard/, Preact, bundled by esbuild) and the third-party
// browser scripts of the API reference (scripts/vendor-assets.mjs). wrangler runs this as
// its [build] command, so `npm start`, `wrangler dev` and `wrangler deploy` serve a fresh
// build with no extra step; the tests that load the dashboard run it too.
//
//   node scripts/build-assets.mjs [--quiet]
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { gzipSync } from "node:zlib";
import { build } from "esbuild";
import { copyVendorScripts } from "./vendor-assets.mjs";

const root = new URL("..", import.meta.url).pathname;
const target = `${root}dist/public`;
const quiet = process.argv.includes("--quiet");

// Built beside dist/public, then moved in file by file (below): a Worker starting meanwhile
// (another `wrangler dev`, a test's pool) always finds the directory and whole files in it.
mkdirSync(`${root}dist`, { recursive: true });
const out = mkdtempSync(`${root}dist/.public-`);

await build({
  entryPoints: { app: `${root}dashboard/main.tsx` },
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  outdir: out,
  logLevel: "warning",
  legalComments: "none",
});
copyFileSync(`${root}dashboard/index.html`, `${out}/index.html`);
copyFileSync(`${root}dashboard/style.css`, `${out}/style.css`);
// Security headers for every asset (Content-Security-Policy, framing, referrer): Workers static
// assets apply this file's rules and do not serve the file itself.
copyFileSync(`${root}dashboard/_headers`, `${out}/_headers`);

// The API reference's script (GET /docs), served from here rather than from a CDN.
copyVendorScripts(out);

/** What a browser downloads for the dashboard, gzipped: the budget (docs/operations.md, "The dashboard") is on this. */
const files = ["index.html", "app.js", "style.css"];
const sizes = Object.fromEntries(files.map((f) => [f, gzipSync(readFileSync(`${out}/${f}`)).length]));
writeFileSync(`${out}/build.json`, JSON.stringify({ gzipBytes: sizes }, null, 2));
if (!quiet) {
  const total = Object.values(sizes).reduce((a, b) => a + b, 0);
  console.log(`[edgecron] dashboard built: ${(total / 1024).toFixed(1)} KB gzipped (${files.map((f) => `${f} ${sizes[f]} B`).join(", ")})`);
}

publish(out, target);

/**
 * Moves every file of `from` into `to`, each by a rename (atomic on one file system), then
 * removes what `to` held that the new build does not: `to` is never missing or half written.
 */
function publish(from, to) {
  const built = new Set(
    readdirSync(from, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name).slice(from.length + 1)),
  );
  for (const file of built) {
    mkdirSync(dirname(join(to, file)), { recursive: true });
    renameSync(join(from, file), join(to, file));
  }
  for (const e of readdirSync(to, { recursive: true, withFileTypes: true })) {
    const file = join(e.parentPath, e.name).slice(to.length + 1);
    if (e.isFile() && !built.has(file)) rmSync(join(to, file), { force: true });
  }
  rmSync(from, { recursive: true, force: true });
}
