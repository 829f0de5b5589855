import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { lastLines, logLine, quietConsole, type SweepFigures, sweepLine } from "../../scripts/dev-output.ts";

/** What a quiet `npm start` shows of `lines` (from one stream): its errors and sweeps, in order. */
function shown(lines: string[]): string[] {
  const out: string[] = [];
  const take = quietConsole({ error: (line) => out.push(line), sweep: (report) => out.push(`sweep ${JSON.stringify(report)}`) });
  for (const line of lines) take(line);
  return out;
}

const E = "\x1b";

describe("a quiet npm start's console (scripts/dev-output.ts)", () => {
  it("leaves wrangler's banner, bindings, offline warnings and per-request lines to the log", () => {
    const stdout = [
      "",
      " ⛅️ wrangler 4.156.2 (update available 4.164.0)",
      "───────────────────────────────────────────────",
      "Your Worker has access to the following bindings:",
      "env.SHARD (Shard)                                 Durable Object            local",
      "[wrangler:warn] Unable to fetch the `Request.cf` object! Falling back to a default placeholder...",
      "Error: getaddrinfo ENOTFOUND workers.cloudflare.com",
      "    at GetAddrInfoReqWrap.onlookupall [as oncomplete] (node:dns:122:26)",
      "[wrangler:info] Ready on http://127.0.0.1:8787",
      "[wrangler:info] GET /v1/jobs 200 OK (11ms)",
      "[wrangler:info] GET /throw 500 Internal Server Error (75ms)",
      "QUEUE edgecron-runs 100/100 (12ms)",
    ];
    const stderr = [
      `${E}[33m▲ ${E}[43;33m[${E}[43;30mWARNING${E}[43;33m]${E}[0m ${E}[1mScheduled Workers are not automatically triggered during local development.${E}[0m`,
      "",
      "  To manually trigger a scheduled event, run:",
      '    curl "http://127.0.0.1:8787/cdn-cgi/local/scheduled"',
    ];
    expect(shown(stdout)).toEqual([]);
    expect(shown(stderr)).toEqual([]);
  });

  it("shows the Worker's errors and uncaught exceptions with their stacks, colours removed", () => {
    const stderr = [
      `${E}[31m✘ ${E}[41;31m[${E}[41;97mERROR${E}[41;31m]${E}[0m ${E}[1mjob job_1: shard s3 unreachable, left to the sweep Error: boom${E}[0m`,
      "",
      "      at Object.fetch (file:///src/app/jobs.ts:66:5)",
      "",
      "",
      `${E}[33m▲ ${E}[43;33m[${E}[43;30mWARNING${E}[43;33m]${E}[0m ${E}[1ma warning${E}[0m`,
      "      at not.shown (file:///x.ts:1:1)",
    ];
    expect(shown(stderr)).toEqual([
      "✘ [ERROR] job job_1: shard s3 unreachable, left to the sweep Error: boom",
      "      at Object.fetch (file:///src/app/jobs.ts:66:5)",
    ]);
    const stdout = [
      "[wrangler:error] Error: uncaught boom",
      "    at Object.fetch (file:///src/index.ts:5:40)",
      "[wrangler:info] GET /throw 500 Internal Server Error (75ms)",
      "    at not.shown (file:///x.ts:1:1)",
    ];
    expect(shown(stdout)).toEqual(["[wrangler:error] Error: uncaught boom", "    at Object.fetch (file:///src/index.ts:5:40)"]);
  });

  it("turns the Worker's sweep report into one line", () => {
    const report = {
      shards: 3,
      jobsCompared: 120,
      jobsRepaired: 2,
      shardsThatRanDueWork: 0,
      tombstonesPurged: 0,
      targetsSealed: 0,
      changesCompared: 4,
      changesCaughtUp: true,
      passCompleted: true,
      passesCompleted: 7,
      passShard: "",
      d1Queries: 9,
      shardCalls: 8,
      durationMs: 41,
    };
    expect(shown([JSON.stringify({ sweep: report }), '{"sweep":{"shards":3,"jobsRe'])).toEqual([
      `sweep ${JSON.stringify({ shards: 3, jobsRepaired: 2, durationMs: 41 })}`,
    ]);
    const at = new Date(2026, 0, 2, 15, 4, 5);
    expect(sweepLine({ shards: 3, jobsRepaired: 0, durationMs: 41 }, at)).toBe(
      "[edgecron] 15:04:05 sweep: 3 shards checked, 0 repaired (41 ms)",
    );
    const one: SweepFigures = { shards: 1, jobsRepaired: 1, durationMs: 7 };
    expect(sweepLine(one, at)).toBe("[edgecron] 15:04:05 sweep: 1 shard checked, 1 repaired (7 ms)");
  });

  it("reads the last lines of a log, colours removed, from its end only", () => {
    const dir = mkdtempSync(join(tmpdir(), "edgecron-dev-output-"));
    try {
      const path = join(dir, "edgecron-dev.log");
      const lines = Array.from({ length: 5_000 }, (_, i) => `line ${i} ${"x".repeat(40)}`);
      writeFileSync(path, `${lines.join("\n")}\n${E}[31m✘ [ERROR] the end${E}[0m\n\n`);
      expect(lastLines(path, 3).split("\n")).toEqual([lines[4_998], lines[4_999], "✘ [ERROR] the end"]);
      writeFileSync(path, "short\n");
      expect(lastLines(path, 40)).toBe("short");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("a quiet npm start's log (scripts/dev-output.ts)", () => {
  it("keeps no qstash_token: wrangler's line per request shows the URL, query included", () => {
    const key = "ek_AbCd0123456789abcdefghijklmnopqrstuvwxyz";
    const lines = [
      `[wrangler:info] POST /v2/publish/https://example.com/hook?qstash_token=${key} 200 OK (12ms)`,
      `[wrangler:info] GET /v2/keys?a=1&QSTASH_TOKEN=${key}&b=2 200 OK (3ms)`,
      `[wrangler:error] GET /v2/dlq?qstash_token=${key}#x 500 Internal Server Error (5ms)`,
    ];
    const kept = lines.map(logLine);
    for (const line of kept) expect(line).not.toContain(key);
    expect(kept[0]).toBe("[wrangler:info] POST /v2/publish/https://example.com/hook?qstash_token=[redacted] 200 OK (12ms)");
    expect(kept[1]).toBe("[wrangler:info] GET /v2/keys?a=1&QSTASH_TOKEN=[redacted]&b=2 200 OK (3ms)");
    // What holds no token is kept as it was.
    expect(logLine("[wrangler:info] GET /v1/jobs?limit=5 200 OK (11ms)")).toBe("[wrangler:info] GET /v1/jobs?limit=5 200 OK (11ms)");
  });
});
