import { describe, expect, it, vi } from "vitest";
import { tableLines, tableRows } from "../../bench/cost.ts";
import { cpuWindow, ROOT } from "../../bench/harness.ts";
import { dispatchQueuesOf, edgecronInFlight, localEdgecronInFlight } from "../../bench/in-flight.ts";
import { median } from "../../bench/median.ts";
import { bullmqConcurrency, parseOptions, systemsOf, UsageError } from "../../bench/options.ts";
import type { Receiver } from "../../bench/receiver.ts";
import { labelOf, tenantLine } from "../../bench/report.ts";
import { MISSED, summarizeWithMissed } from "../../bench/stats.ts";
import { analyseSteady, expectedPairs, pairCounter, type SteadyReceipt, slotOf } from "../../bench/steady.ts";
import { createJob, deleteJobs, type Run, retryAfterMs } from "../../bench/workload.ts";

/** The steady workload's analysis (bench/steady.ts) on receipts made by hand, the bench's options, and its other pure figures. */

const T = Date.parse("2030-01-01T00:00:00.000Z");
const at = (offsetMs: number) => new Date(T + offsetMs).toISOString();
const w = { T, seconds: 3 };

const steady = (t: number, index: number, scheduledAt: string | null, runId: string | null, attempt = "1"): SteadyReceipt => ({
  t: T + t,
  kind: "steady",
  index,
  runId,
  scheduledAt,
  attempt,
});

// Schedules 0, 1 and 3 were created (2 was not); D = 3, so 9 pairs are expected.
const created = new Set([0, 1, 3]);
const receipts: SteadyReceipt[] = [
  steady(50, 3, at(0), "g"), // s3 second 0: lag 50
  steady(120, 0, at(0), "a"), // s0 second 0: lag 120
  steady(300, 1, at(0), "d"), // s1 second 0: lag 300
  steady(400, 1, at(0), "e"), // s1 second 0 again, another run id: a double fire
  steady(600, 3, at(-1_000), "h"), // before the window
  steady(700, 3, at(500), "i"), // not on a whole second
  steady(800, 3, null, null), // no scheduled-at, no run id
  steady(900, 2, at(0), "j"), // schedule 2 was never created
  { t: T + 950, kind: "calibration", index: 0, runId: "k", scheduledAt: at(0), attempt: "1" },
  steady(1_050, 0, at(1_000), "b"), // s0 second 1: lag 50
  steady(1_900, 0, at(1_000), "b", "2"), // s0 second 1 again, same run id, second attempt
  steady(1_990, 1, at(2_000), "f"), // s1 second 2: lag −10, before its second
  steady(2_010, 0, at(2_000), "c"), // s0 second 2: lag 10
  steady(3_100, 3, at(3_000), "l"), // after the window
];

describe("steady analysis", () => {
  it("places a scheduled-at in the window or says why not", () => {
    expect(slotOf(at(0), w)).toEqual({ k: 0 });
    expect(slotOf(at(2_000), w)).toEqual({ k: 2 });
    expect(slotOf(at(3_000), w)).toEqual({ outside: "extra" });
    expect(slotOf(at(-1_000), w)).toEqual({ outside: "early" });
    expect(slotOf(at(1), w)).toEqual({ outside: "offGrid" });
    expect(slotOf("yesterday", w)).toEqual({ outside: "unreadable" });
    expect(slotOf(null, w)).toEqual({ outside: "unreadable" });
  });

  it("expects every second of every created schedule", () => {
    expect(expectedPairs([0, 3], { T, seconds: 2 })).toEqual([
      { schedule: 0, second: 0 },
      { schedule: 0, second: 1 },
      { schedule: 3, second: 0 },
      { schedule: 3, second: 1 },
    ]);
  });

  it("counts missed, doubled, extra and out-of-window receipts, and the lag of first receipts", () => {
    const f = analyseSteady(receipts, created, w);
    expect(f.expectedPairs).toBe(9);
    expect(f.receivedPairs).toBe(6);
    expect(f.missed).toBe(3);
    expect(f.missedBySecond).toEqual([0, 2, 1]);
    expect(f.missedExamples).toEqual([
      { schedule: 1, second: 1 },
      { schedule: 3, second: 1 },
      { schedule: 3, second: 2 },
    ]);
    expect(f.schedulesWithMisses).toBe(2);
    // Lags −10, 10, 50, 50, 120, 300: nearest rank p50 is the 3rd, p90 the 6th.
    expect(f.lagMs).toEqual({ count: 6, min: -10, p50: 50, p90: 300, p99: 300, max: 300, mean: 86.7 });
    // The 3 missed pairs count as infinite lags: of 9, the 5th is 120 ms, the 9th (p90) already missed.
    expect(f.lagMsWithMissed).toEqual({ count: 9, missed: 3, p50: 120, p90: MISSED, p99: MISSED, max: MISSED });
    expect(f.lagP50BySecond).toEqual([120, 50, -10]);
    expect(f.lagMaxBySecond).toEqual([300, 50, 10]);
    expect(f.firedBeforeInstant).toBe(1);
    expect(f.doubleFires).toBe(1);
    expect(f.doubleFireExamples).toEqual([{ schedule: 1, second: 0, runIds: 2 }]);
    expect(f.extraReceipts).toBe(2);
    expect(f.runIdsReceivedMoreThanOnce).toBe(1);
    expect(f.receiptsWithAttemptAbove1).toBe(1);
    expect(f.missingRunIdHeader).toBe(1);
    expect(f.outsideWindow).toEqual({ early: 1, extra: 1, offGrid: 1, unreadable: 1 });
    expect(f.fromSchedulesNotCreated).toBe(1);
    expect(f.receipts).toBe(13);
  });

  it("counts the expected pairs received so far, reading only new receipts", () => {
    const count = pairCounter(created, w);
    const arrived: SteadyReceipt[] = [];
    expect(count(arrived)).toBe(0);
    arrived.push(...receipts.slice(0, 4)); // s3/0, s0/0, s1/0 twice
    expect(count(arrived)).toBe(3);
    arrived.push(...receipts.slice(4));
    expect(count(arrived)).toBe(6);
  });
});

describe("lag percentiles with missed fires", () => {
  it("counts a missed fire as an infinite lag", () => {
    const lags = Array.from({ length: 98 }, (_, i) => i + 1); // 1 … 98 ms
    // 100 expected, 2 missed: the 99th rank is a missed one, the 50th is 50 ms.
    expect(summarizeWithMissed(lags, 2)).toEqual({ count: 100, missed: 2, p50: 50, p90: 90, p99: MISSED, max: MISSED });
    // One missed in 100 is past the 99th rank: p99 is still a lag, max is not.
    expect(summarizeWithMissed([...lags, 99], 1)).toMatchObject({ p99: 99, max: MISSED });
    expect(summarizeWithMissed(lags, 0)).toMatchObject({ count: 98, missed: 0, p99: 98, max: 98 });
    expect(summarizeWithMissed([], 3)).toEqual({ count: 3, missed: 3, p50: MISSED, p90: MISSED, p99: MISSED, max: MISSED });
    expect(summarizeWithMissed([], 0)).toEqual({ count: 0, missed: 0, p50: null, p90: null, p99: null, max: null });
  });

  it("takes the median of the floor's runs", () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, null, 1, 2, 3])).toBe(2.5);
    expect(median([null, undefined])).toBeNull();
  });
});

describe("the CPU window", () => {
  it("ends at the last call + the settle window when the wait ran on for fires that never came", async () => {
    vi.useFakeTimers({ now: Date.parse("2030-01-01T00:00:00.000Z") });
    try {
      const T = Date.now() + 2_000;
      const cpu = cpuWindow(T, [], 10_000);
      const receipts = [
        { t: T + 5_000, kind: "steady" },
        { t: T + 6_000, kind: "calibration" },
      ];
      const receiver = { receipts } as unknown as Receiver;
      await vi.advanceTimersByTimeAsync(2_000 + 60_000);
      expect(await cpu.before).not.toBeUndefined();
      // The last workload call at T + 5 s: the window ends at the first sample from T + 15 s on.
      const end = cpu.end(receiver, false);
      expect(end.until - T).toBeGreaterThanOrEqual(15_000);
      expect(end.until - T).toBeLessThan(16_500);
      expect(end.end).toMatch(/last call received \+ 10 s/);

      // Everything arrived: the window ends with the wait, whatever its settle took.
      const whole = cpuWindow(Date.now() + 500, [], 10_000);
      await vi.advanceTimersByTimeAsync(20_000);
      await whole.before;
      const ended = whole.end({ receipts: [{ t: Date.now() - 12_000, kind: "burst" }] } as unknown as Receiver, true);
      expect(ended).toMatchObject({ until: Date.now(), end: "the end of the wait" });
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("calls in flight", () => {
  it("are six per consumer invocation, one invocation per dispatch queue locally", () => {
    expect(dispatchQueuesOf('[vars]\nSHARD_COUNT = "16"\nDISPATCH_QUEUES = "RUNS, RUNS_1,RUNS_2"\n')).toEqual(["RUNS", "RUNS_1", "RUNS_2"]);
    expect(edgecronInFlight('DISPATCH_QUEUES = "RUNS"')).toEqual({ perInvocation: 6, invocations: 1, total: 6 });
    expect(() => edgecronInFlight("[vars]\n")).toThrow(/DISPATCH_QUEUES/);
    // What bench/README.md says of the runner's config as it is.
    expect(localEdgecronInFlight(ROOT)).toEqual({ perInvocation: 6, invocations: 2, total: 12 });
  });

  it("gives BullMQ's workers as many in all unless told otherwise", () => {
    expect(bullmqConcurrency({ "bullmq-concurrency": 0, "bullmq-workers": 2 }, 12)).toBe(6);
    expect(bullmqConcurrency({ "bullmq-concurrency": 0, "bullmq-workers": 5 }, 12)).toBe(3);
    expect(bullmqConcurrency({ "bullmq-concurrency": 50, "bullmq-workers": 2 }, 12)).toBe(50);
  });
});

describe("the tenant's rate limit and limits", () => {
  it("waits what Retry-After says, a second at least", () => {
    expect(retryAfterMs("3")).toBe(3_000);
    expect(retryAfterMs(" 1 ")).toBe(1_000);
    expect(retryAfterMs("0")).toBe(1_000);
    expect(retryAfterMs(null)).toBe(1_000);
    expect(retryAfterMs("Wed, 21 Oct 2015 07:28:00 GMT")).toBe(1_000);
  });

  /** A run whose stack answers each API call with the next of `answers`, recording the calls. */
  const runAnswering = (answers: Array<{ status: number; json?: unknown; retryAfter?: string }>) => {
    const calls: string[] = [];
    const api = async (method: string, path: string) => {
      calls.push(`${method} ${path}`);
      const a = answers.shift() ?? { status: 500 };
      const headers = new Headers(a.retryAfter === undefined ? {} : { "retry-after": a.retryAfter });
      return { status: a.status, json: a.json ?? {}, headers };
    };
    const opts = parseOptions([], {})!;
    const run = { stack: { api }, opts, token: "ek_test", throttled: { refusals: 0, waitedMs: 0 } } as unknown as Run;
    return { run, calls };
  };
  const T = Date.parse("2030-01-01T00:00:00.000Z");

  it("asks again after a 429 as Retry-After says, and counts it; never after another failure", async () => {
    vi.useFakeTimers();
    try {
      const { run, calls } = runAnswering([
        { status: 429, retryAfter: "2" },
        { status: 429, retryAfter: "1" },
        { status: 201, json: { id: "job_1", nextRunAt: new Date(T).toISOString() } },
      ]);
      const made = createJob(run, T, "http://127.0.0.1:1/burst/0");
      await vi.advanceTimersByTimeAsync(3_000);
      expect(await made).toEqual({ id: "job_1", nextMismatch: false });
      expect(calls).toEqual(["POST /v1/jobs", "POST /v1/jobs", "POST /v1/jobs"]);
      expect(run.throttled).toEqual({ refusals: 2, waitedMs: 3_000 });

      const failed = runAnswering([{ status: 503 }, { status: 201, json: { id: "job_2" } }]);
      expect(await createJob(failed.run, T, "http://127.0.0.1:1/burst/1")).toEqual({ error: "HTTP 503" });
      expect(failed.calls).toHaveLength(1);

      const quota = runAnswering([{ status: 403, json: { error: { code: "quota_exceeded", message: "…" } } }]);
      expect(await createJob(quota.run, T, "http://127.0.0.1:1/burst/2")).toEqual({ error: "HTTP 403 quota_exceeded" });

      const removal = runAnswering([{ status: 429, retryAfter: "1" }, { status: 200 }]);
      const gone = deleteJobs(removal.run, ["job_1"]);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(await gone).toEqual([true]);
      expect(removal.calls).toEqual(["DELETE /v1/jobs/job_1", "DELETE /v1/jobs/job_1"]);
      expect(removal.run.throttled).toEqual({ refusals: 1, waitedMs: 1_000 });
      expect(await deleteJobs(runAnswering([{ status: 404 }]).run, ["job_2"])).toEqual([false]);
    } finally {
      vi.useRealTimers();
    }
  });

  it("says which limits are defaults and which the bench set", () => {
    const limits = { maxJobs: 10_000, maxRunsInFlight: 1_000, requestsPerSecond: 100, retentionDays: null };
    expect(tenantLine({ as: "tenant", limits, setByBench: {} })).toContain("every limit its default");
    const raised = tenantLine({ as: "tenant", limits: { ...limits, maxJobs: 10_200 }, setByBench: { maxJobs: 10_200 } });
    expect(raised).toContain("maxJobs 10200");
    expect(raised).toContain("maxJobs set to 10200 by the bench, other limits default");
    expect(tenantLine({ as: "admin" })).toContain("admin token");
    expect(labelOf({ system: "edgecron", tenant: { as: "admin" } })).toBe("edgecron (admin token)");
    expect(labelOf({ system: "edgecron", tenant: { as: "tenant" } })).toBe("edgecron (tenant)");
    expect(labelOf({ system: "bullmq-aof" })).toBe("bullmq + AOF everysec");
  });
});

describe("the cost meter's breakdowns by table", () => {
  it("reads rows written per run by object and table", () => {
    const cost = { runsFinished: 100, shardTables: { runs: 300, "(setAlarm)": 10 }, gateTables: { permits: 200 } };
    const rows = tableRows(cost, 100);
    expect(rows).toEqual([
      { object: "shard", table: "runs", rowsWrittenPerRun: 3 },
      { object: "shard", table: "(setAlarm)", rowsWrittenPerRun: 0.1 },
      { object: "gate", table: "permits", rowsWrittenPerRun: 2 },
    ]);
    expect(tableLines(rows!)).toEqual(["    shard  runs 3, (setAlarm) 0.1", "    gate   permits 2"]);
  });

  it("is absent when the meter has none, and never fails on what it does not know", () => {
    expect(tableRows({ runsFinished: 10, perRun: null }, 10)).toBeNull();
    expect(tableRows(null, 10)).toBeNull();
    expect(tableRows({ shardTables: { runs: "many" } }, 0)).toEqual([{ object: "shard", table: "runs", rowsWrittenPerRun: null }]);
  });
});

describe("bench options", () => {
  it("defaults to the burst on edgecron alone, as a tenant with the default limits, after a warm-up", () => {
    const o = parseOptions([], {})!;
    expect(o).toMatchObject({ workload: "burst", peer: "none", jobs: 10_000, schedules: 1_000, "duration-s": 30 });
    expect(o).toMatchObject({ as: "tenant", "tenant-max-in-flight": 0, "tenant-max-jobs": 0, warmup: 200, calibration: 200 });
    expect(o).toMatchObject({ "bullmq-workers": 2, "bullmq-concurrency": 0, "redis-aof": "both" });
    expect(systemsOf(o)).toEqual(["edgecron"]);
    expect(parseOptions(["--as", "admin"], {})!.as).toBe("admin");
    expect(() => parseOptions(["--as", "root"], {})).toThrow(UsageError);
  });

  it("reads the steady workload and the peer from the command line and the environment", () => {
    const o = parseOptions(["--workload", "steady", "--schedules=100", "--duration-s", "10", "--peer=both"], {})!;
    expect(o).toMatchObject({ workload: "steady", peer: "both", schedules: 100, "duration-s": 10 });
    expect(systemsOf(o)).toEqual(["edgecron", "bullmq", "bullmq-aof"]);
    const e = parseOptions(["--bullmq-concurrency", "20"], { BENCH_PEER: "bullmq", BENCH_WORKLOAD: "steady" })!;
    expect(e).toMatchObject({ workload: "steady", peer: "bullmq", "bullmq-concurrency": 20 });
    expect(systemsOf(e)).toEqual(["bullmq", "bullmq-aof"]);
    expect(systemsOf({ peer: "bullmq", "redis-aof": "no" })).toEqual(["bullmq"]);
    expect(systemsOf({ peer: "both", "redis-aof": "everysec" })).toEqual(["edgecron", "bullmq-aof"]);
    expect(systemsOf({ peer: "none", "redis-aof": "everysec" })).toEqual(["edgecron"]);
    // The command line wins over the environment.
    expect(parseOptions(["--peer", "none"], { BENCH_PEER: "bullmq" })!.peer).toBe("none");
  });

  it("runs edgecron as two processes unless told one", () => {
    expect(parseOptions([], {})!.topology).toBe("two");
    expect(parseOptions(["--topology", "one"], {})!.topology).toBe("one");
    expect(parseOptions([], { BENCH_TOPOLOGY: "one" })!.topology).toBe("one");
    expect(() => parseOptions(["--topology", "three"], {})).toThrow(UsageError);
  });

  it("refuses what it cannot run", () => {
    expect(() => parseOptions(["--peer", "sidekiq"], {})).toThrow(UsageError);
    expect(() => parseOptions(["--workload"], {})).toThrow(UsageError);
    expect(() => parseOptions([], { BENCH_WORKLOAD: "trickle" })).toThrow(UsageError);
    expect(() => parseOptions(["--duration-s", "0"], {})).toThrow(UsageError);
    expect(() => parseOptions(["--schedules", "1.5"], {})).toThrow(UsageError);
    expect(() => parseOptions(["--bullmq-workers", "0"], {})).toThrow(UsageError);
    expect(parseOptions(["--help"], {})).toBeNull();
  });
});
