import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eachLine } from "../support/lines";
import { freePort, type Stack, sleep, startStack, until } from "../support/local-stack";

/**
 * `npm start` as a developer sees it (quiet: no EDGECRON_VERBOSE): a summary once ready, one
 * line per sweep, and wrangler's own output in the log file only; on a failure, the end of
 * that log.
 */

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const TOKEN = "e2e-quiet-token-91c2-0123456789abcdef";
const SWEEP_LINE = /^\[edgecron\] \d\d:\d\d:\d\d sweep: (\d+) shards? checked, (\d+) repaired \(\d+ ms\)$/;
/** wrangler's output that must stay out of a quiet console, each with what it is. */
const NOISE: Array<[RegExp, string]> = [
  [/getaddrinfo/, "the offline Request.cf lookup's stack trace"],
  [/Your Worker has access to the following bindings/, "the bindings table"],
  [/[┌┐└┘│├┤─]/, "the migrations' tables"],
  [/Scheduled Workers are not automatically triggered/, "the cron triggers warning"],
  [/\[wrangler:/, "a per-request or wrangler:info line"],
  [/\{"sweep":/, "the sweep's raw report"],
];

describe("a quiet npm start", () => {
  let stack: Stack | undefined;
  const output: Array<{ line: string; stream: string }> = [];
  const lines = () => output.map((o) => o.line).filter((line) => line.trim() !== "");
  const sweeps = () => lines().filter((line) => /sweep/.test(line));

  beforeAll(async () => {
    // No sweep but the one at the start, so that each line can be matched with its sweep.
    stack = await startStack({
      quiet: true,
      token: TOKEN,
      env: { SWEEP_INTERVAL_MS: "3600000" },
      onLine: (line, stream) => output.push({ line, stream }),
    });
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it("prints a summary with the URL, the token, the state and the log file", async () => {
    const port = stack!.port;
    await until("the summary", 30_000, () => (lines().some((l) => l.includes("try:")) ? true : undefined), stack);
    const summary = lines().slice(lines().indexOf(`[edgecron] ready on http://localhost:${port}`));
    expect(summary.slice(0, 7), lines().join("\n")).toEqual([
      `[edgecron] ready on http://localhost:${port}`,
      `[edgecron]   admin token: ${TOKEN}`,
      `[edgecron]   dashboard:   http://localhost:${port}/`,
      `[edgecron]   API docs:    http://localhost:${port}/docs`,
      `[edgecron]   state:       ${stack!.persistDir}`,
      `[edgecron]   log:         ${join(stack!.persistDir, "logs", "edgecron-dev.log")}`,
      `[edgecron]   try:         curl -H 'Authorization: Bearer ${TOKEN}' ${stack!.base}/v1/jobs`,
    ]);
  });

  it("prints exactly one readable line per sweep", async () => {
    await until("the first sweep's line", 30_000, () => (sweeps().length > 0 ? true : undefined), stack);
    expect(sweeps()).toHaveLength(1);
    expect(sweeps()[0]).toMatch(SWEEP_LINE);
    expect(sweeps()[0]).toContain("0 shards checked"); // nothing in the catalog yet

    const created = await stack!.api("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 86_400_000).toISOString() },
      target: { url: "http://127.0.0.1:9/never" },
    });
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    // The cron trigger, as start.mjs fires it.
    expect((await fetch(`${stack!.base}/cdn-cgi/local/scheduled?cron=${encodeURIComponent("* * * * *")}`)).status).toBe(200);
    await until("the second sweep's line", 30_000, () => (sweeps().length > 1 ? true : undefined), stack);
    await sleep(1_000); // a second line for the same sweep would have come by now
    expect(sweeps()).toHaveLength(2);
    expect(SWEEP_LINE.exec(sweeps()[1]!)?.slice(1), sweeps()[1]).toEqual(["1", "0"]); // the job's shard, nothing to repair
  });

  it("keeps wrangler's output off the console", () => {
    for (const [pattern, what] of NOISE) {
      const found = output.find((o) => pattern.test(o.line));
      expect(found, `${what} on ${found?.stream}: ${found?.line}`).toBeUndefined();
    }
    // Only start.mjs's own lines: no error happened, so none of wrangler's is shown.
    expect(lines().filter((line) => !line.startsWith("[edgecron] "))).toEqual([]);
  });

  it("writes wrangler's output to the log file", () => {
    const log = readFileSync(join(stack!.persistDir, "logs", "edgecron-dev.log"), "utf8");
    expect(log).toContain("0001_jobs.sql"); // the migrations
    expect(log).toContain("Your Worker has access to the following bindings");
    expect(log).toMatch(/\[wrangler:info\] POST \/v1\/jobs 201/);
    expect(log.match(/\{"sweep":/g)).toHaveLength(2);
  });
});

describe("a quiet npm start that fails", () => {
  let dir = "";
  let holder: Server | undefined;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "edgecron-e2e-quiet-"));
  });

  afterAll(async () => {
    if (holder) await new Promise<void>((resolve) => holder!.close(() => resolve()));
    await rm(dir, { recursive: true, force: true });
  });

  it("shows wrangler's error and the end of the log, and exits non-zero", { timeout: 120_000 }, async () => {
    // The port taken: wrangler dev cannot listen, and exits.
    const port = await freePort();
    holder = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => holder!.listen(port, "127.0.0.1", resolve));
    const persistDir = join(dir, "state");
    const child = spawn(process.execPath, [join(ROOT, "scripts", "start.mjs")], {
      cwd: ROOT,
      detached: true, // its own process group, to end wrangler and workerd with it
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        PORT: String(port),
        PERSIST_DIR: persistDir,
        WRANGLER_REGISTRY_PATH: join(dir, "registry"),
        WRANGLER_SEND_METRICS: "false",
        EDGECRON_VERBOSE: "0",
      },
    });
    const stdout: string[] = [];
    const stderr: string[] = [];
    eachLine(child, (line, stream) => (stream === "stdout" ? stdout : stderr).push(line));
    const exit = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
    const code = await Promise.race([exit, sleep(100_000).then(() => "timeout" as const)]);
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {} // already gone, as it should be
    const said = `stdout:\n${stdout.join("\n")}\nstderr:\n${stderr.join("\n")}`;
    expect(code, said).not.toBe("timeout");
    expect(code, said).not.toBe(0);
    const logPath = join(persistDir, "logs", "edgecron-dev.log");
    expect(existsSync(logPath)).toBe(true);
    const err = stderr.join("\n");
    expect(err, said).toMatch(/✘ \[ERROR\] Address already in use/); // shown as it came
    expect(err, said).toContain("[edgecron] wrangler dev exited (exit code 1)");
    expect(err, said).toContain(`[edgecron] the last lines of ${logPath}:`);
    expect(err, said).toContain(`[edgecron] the whole log: ${logPath}`);
    // The log's end, as it is in the file (what it ends with varies: under load, esbuild can
    // write a dump of its own as wrangler goes).
    // biome-ignore lint/suspicious/noControlCharactersInRegex: the console gets the log without its colour codes
    const plain = readFileSync(logPath, "utf8").replace(/\x1b\[[0-9;]*[A-Za-z]/g, "");
    const logEnd = plain.trimEnd().split(/\r?\n/).slice(-5).join("\n");
    expect(logEnd.length).toBeGreaterThan(0);
    expect(err, said).toContain(logEnd);
    expect(stdout.join("\n"), said).not.toContain("ready on");
  });
});
