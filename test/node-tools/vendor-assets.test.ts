import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SCALAR_SCRIPT } from "../../src/api/docs";

/**
 * GET /docs loads SCALAR_SCRIPT from the static assets; scripts/build-assets.mjs puts it there
 * through scripts/vendor-assets.mjs. If the two paths drift apart, or the package moves its
 * browser build, the page loads nothing: this builds the vendor step into a temporary folder.
 */
const { copyVendorScripts } = (await import(new URL("../../scripts/vendor-assets.mjs", import.meta.url).href)) as {
  copyVendorScripts: (out: string) => string[];
};

const out = mkdtempSync(join(tmpdir(), "edgecron-vendor-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

describe("the vendor scripts in the static assets", () => {
  it("put Scalar's standalone build where /docs loads it from, defining the global the page calls", () => {
    const written = copyVendorScripts(out);
    expect(written).toContain(`${out}${SCALAR_SCRIPT}`);
    const script = readFileSync(`${out}${SCALAR_SCRIPT}`, "utf8");
    expect(script).toContain("window.Scalar={createApiReference:");
    // The map is not copied, so the script must not point at it.
    expect(script).not.toMatch(/sourceMappingURL/);
  });
});
