import { describe, expect, it } from "vitest";
import { parseOptions, systemsOf, UsageError } from "../../bench/options.ts";
import { analyseSteady, expectedPairs, pairCounter, type SteadyReceipt, slotOf } from "../../bench/steady.ts";

/** The steady workload's analysis (bench/steady.ts) on receipts made by hand, and the bench's options. */

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

describe("bench options", () => {
  it("defaults to the burst on edgecron alone", () => {
    const o = parseOptions([], {})!;
    expect(o).toMatchObject({ workload: "burst", peer: "none", jobs: 10_000, schedules: 1_000, "duration-s": 30 });
    expect(o).toMatchObject({ "bullmq-workers": 2, "bullmq-concurrency": 50 });
    expect(systemsOf(o)).toEqual(["edgecron"]);
  });

  it("reads the steady workload and the peer from the command line and the environment", () => {
    const o = parseOptions(["--workload", "steady", "--schedules=100", "--duration-s", "10", "--peer=both"], {})!;
    expect(o).toMatchObject({ workload: "steady", peer: "both", schedules: 100, "duration-s": 10 });
    expect(systemsOf(o)).toEqual(["edgecron", "bullmq"]);
    const e = parseOptions(["--bullmq-concurrency", "20"], { BENCH_PEER: "bullmq", BENCH_WORKLOAD: "steady" })!;
    expect(e).toMatchObject({ workload: "steady", peer: "bullmq", "bullmq-concurrency": 20 });
    expect(systemsOf(e)).toEqual(["bullmq"]);
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
