import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

/**
 * The dashboard's budget (README, "Dashboard"): what a browser downloads for it, gzipped, stays
 * under 100 KB, and it loads nothing from another origin. Sizes, not times: they do not vary
 * with the machine.
 */
const BUDGET_GZIP_BYTES = 100 * 1024;
const ROOT = new URL("../../", import.meta.url).pathname;

describe("dashboard bundle", () => {
  it("builds within its budget and loads only its own files", () => {
    execFileSync(process.execPath, ["scripts/build-assets.mjs", "--quiet"], { cwd: ROOT });
    const { gzipBytes } = JSON.parse(readFileSync(`${ROOT}dist/public/build.json`, "utf8")) as { gzipBytes: Record<string, number> };
    const total = Object.values(gzipBytes).reduce((a, b) => a + b, 0);
    expect(Object.keys(gzipBytes).sort()).toEqual(["app.js", "index.html", "style.css"]);
    expect(total).toBeGreaterThan(1024); // a build that produced next to nothing is no build
    expect(total).toBeLessThanOrEqual(BUDGET_GZIP_BYTES);

    const html = readFileSync(`${ROOT}dist/public/index.html`, "utf8");
    const css = readFileSync(`${ROOT}dist/public/style.css`, "utf8");
    expect([...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1])).toEqual(["/style.css", "/app.js"]);
    expect(css).not.toMatch(/url\(|@import/);
  });
});
