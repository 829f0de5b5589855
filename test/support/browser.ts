import { accessSync, constants, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Browser, chromium } from "playwright-core";

/**
 * The Chromium the browser tests drive, so that `npm install` then `npm test` is all a machine
 * needs: a system `chromium` on PATH when there is one (it starts faster and is kept up to date
 * by the system), else the one @sparticuz/chromium carries in its npm package, unpacked on
 * first use. EDGECRON_CHROMIUM chooses instead: `bundled`, `system`, or a path (as
 * CHROMIUM_PATH, the older name, still does).
 */
export async function launchChromium(): Promise<{ browser: Browser; which: string }> {
  const choice = process.env.EDGECRON_CHROMIUM ?? process.env.CHROMIUM_PATH ?? "";
  if (choice === "bundled") return launchBundled();
  const system = choice === "" || choice === "system" ? onPath("chromium") : choice;
  if (system) {
    // Root in a container has no user namespace for Chromium's sandbox; the tests load only the local dashboard.
    const browser = await chromium.launch({ executablePath: system, args: ["--no-sandbox"] });
    return { browser, which: system };
  }
  if (choice === "system") throw new Error("EDGECRON_CHROMIUM=system, but no chromium is on PATH");
  return launchBundled();
}

async function launchBundled(): Promise<{ browser: Browser; which: string }> {
  const { default: bundled } = await import("@sparticuz/chromium");
  const { executablePath, env } = await unpackBundled();
  // Its own flags (no sandbox, no zygote, software GL: it is built to run where nothing else is
  // installed) but one: in a single process, closing a test's last page ends the browser.
  const args = bundled.args.filter((arg) => arg !== "--single-process");
  const browser = await chromium.launch({ executablePath, args, env: { ...process.env, ...env } });
  return { browser, which: `${executablePath} (@sparticuz/chromium)` };
}

const require = createRequire(import.meta.url);
const CACHE = fileURLToPath(new URL("../../node_modules/.cache/edgecron-chromium/", import.meta.url));

/**
 * The package's Chromium unpacked, once per version, into node_modules/.cache rather than the
 * package's default of /tmp/chromium, which another checkout (another version) may hold or a
 * crash may have left half written: a directory counts only once its marker is written. With
 * it, the package's NSS and expat, the only libraries it needs beyond glibc (it unpacks them
 * only on Amazon Linux; a slim Debian lacks them), and its fonts where the system has none.
 */
async function unpackBundled(): Promise<{ executablePath: string; env: Record<string, string> }> {
  const entry = require.resolve("@sparticuz/chromium");
  const { version } = JSON.parse(readFileSync(join(dirname(entry), "..", "package.json"), "utf8")) as { version: string };
  const dir = join(CACHE, version);
  const marker = join(dir, ".unpacked");
  if (!existsSync(marker)) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const { default: bundled, inflate } = await import("@sparticuz/chromium");
    // The package unpacks into os.tmpdir(), which reads TMPDIR at each call.
    const tmpdir = process.env.TMPDIR;
    process.env.TMPDIR = dir;
    try {
      await bundled.executablePath();
      await inflate(join(dirname(entry), "..", "bin", "al2023.tar.br"));
    } finally {
      if (tmpdir === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = tmpdir;
    }
    // Its fonts.conf names /tmp/fonts; this one names where they are.
    const fonts = join(dir, "fonts");
    writeFileSync(
      join(fonts, "fonts.conf"),
      `<?xml version="1.0"?>\n<fontconfig><dir>${fonts}</dir><cachedir>${join(dir, "fonts-cache")}</cachedir></fontconfig>\n`,
    );
    writeFileSync(marker, "");
  }
  const libs = join(dir, "al2023", "lib");
  const env: Record<string, string> = { LD_LIBRARY_PATH: [libs, process.env.LD_LIBRARY_PATH].filter(Boolean).join(":") };
  if (!process.env.FONTCONFIG_PATH && !existsSync("/etc/fonts/fonts.conf")) env.FONTCONFIG_PATH = join(dir, "fonts");
  return { executablePath: join(dir, "chromium"), env };
}

/** The first executable `name` on PATH, as `command -v` finds it, or null. */
function onPath(name: string): string | null {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Not here: the next directory.
    }
  }
  return null;
}
