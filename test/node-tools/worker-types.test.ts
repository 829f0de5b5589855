import { spawnSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/**
 * worker-configuration.d.ts (the Env interface) is generated from wrangler.toml and checked in.
 * This regenerates it beside the real one (import paths in it are relative to the file) and
 * compares, so a binding or var added to wrangler.toml without `npm run types` fails here.
 */
const root = fileURLToPath(new URL("../../", import.meta.url));
const wrangler = fileURLToPath(new URL("../../node_modules/wrangler/bin/wrangler.js", import.meta.url));
const CHECKED_IN = "worker-configuration.d.ts";
const scratch = `.worker-configuration.${process.pid}.d.ts`;

/** The command that wrote the file is in its header; the scratch file's path is not part of what is compared. */
const normalize = (text: string) => text.replace(` ${scratch}\``, "`");

describe("generated Worker types", () => {
  it(`${CHECKED_IN} is what \`npm run types\` generates from wrangler.toml`, () => {
    const script = JSON.parse(readFileSync(`${root}package.json`, "utf8")).scripts.types as string;
    const args = script.replace(/^wrangler /, "").split(" ");
    try {
      const run = spawnSync(process.execPath, [wrangler, ...args, scratch], {
        cwd: root,
        encoding: "utf8",
        env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" },
      });
      expect(run.status, run.stderr || run.stdout).toBe(0);
      const fresh = normalize(readFileSync(`${root}${scratch}`, "utf8"));
      const checkedIn = readFileSync(`${root}${CHECKED_IN}`, "utf8");
      expect(checkedIn === fresh, `${CHECKED_IN} is stale: run \`npm run types\` and commit the result`).toBe(true);
    } finally {
      rmSync(`${root}${scratch}`, { force: true });
    }
  });
});
