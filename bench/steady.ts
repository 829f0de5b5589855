/**
 * The steady workload's figures (bench/README.md): S schedules, each due every whole second
 * from T to T + (D − 1) s, so S × D (schedule, second) pairs are expected. A receipt belongs
 * to a schedule by its path (/steady/<i>) and to a second by its X-Edgecron-Scheduled-At.
 * Pure functions of the receipts: nothing here knows which scheduler sent them.
 */
import type { Receipt } from "./receiver.ts";
import { percentile, type Summary, type SummaryWithMissed, summarize, summarizeWithMissed } from "./stats.ts";

export interface SteadyWindow {
  /** The first second due, epoch ms, on a whole second. */
  T: number;
  /** D: the seconds T, T + 1 s, … T + (D − 1) s are due. */
  seconds: number;
}

export type SteadyReceipt = Pick<Receipt, "t" | "kind" | "index" | "runId" | "scheduledAt" | "attempt">;

/** Where a scheduled-at header falls: second k of the window (0 ≤ k < D), or outside it. */
export type Slot = { k: number } | { outside: "early" | "extra" | "offGrid" | "unreadable" };

export function slotOf(scheduledAt: string | null, { T, seconds }: SteadyWindow): Slot {
  const at = scheduledAt === null ? Number.NaN : Date.parse(scheduledAt);
  if (Number.isNaN(at)) return { outside: "unreadable" };
  const offset = at - T;
  if (offset % 1_000 !== 0) return { outside: "offGrid" };
  const k = offset / 1_000;
  if (k < 0) return { outside: "early" };
  if (k >= seconds) return { outside: "extra" };
  return { k };
}

/** Every expected (schedule, second) pair of the created schedules, schedule by schedule. */
export function expectedPairs(created: Iterable<number>, { seconds }: SteadyWindow): Array<{ schedule: number; second: number }> {
  const pairs: Array<{ schedule: number; second: number }> = [];
  for (const schedule of created) for (let second = 0; second < seconds; second++) pairs.push({ schedule, second });
  return pairs;
}

/**
 * A counter of the expected pairs received so far, for the wait: each call reads only the
 * receipts added since the previous one (the receiver only ever appends).
 */
export function pairCounter(created: ReadonlySet<number>, w: SteadyWindow): (receipts: readonly SteadyReceipt[]) => number {
  const seen = new Set<number>();
  let read = 0;
  return (receipts) => {
    for (; read < receipts.length; read++) {
      const r = receipts[read]!;
      if (r.kind !== "steady" || r.index === null || !created.has(r.index)) continue;
      const slot = slotOf(r.scheduledAt, w);
      if ("k" in slot) seen.add(r.index * w.seconds + slot.k);
    }
    return seen.size;
  };
}

export interface SteadyFigures {
  schedules: number;
  seconds: number;
  expectedPairs: number;
  /** Expected pairs with at least one receipt. */
  receivedPairs: number;
  /** Expected pairs with no receipt by the end of the wait. */
  missed: number;
  /** Per second k of the window. */
  missedBySecond: number[];
  schedulesWithMisses: number;
  missedExamples: Array<{ schedule: number; second: number }>;
  /** First receipt of each received pair − its scheduled second. */
  lagMs: Summary;
  /** The same over every expected pair, a missed one counted as an infinite lag. */
  lagMsWithMissed: SummaryWithMissed;
  /** Per second k: p50 and max of the lag of the pairs of that second. */
  lagP50BySecond: Array<number | null>;
  lagMaxBySecond: Array<number | null>;
  /** Received pairs whose first receipt came before their second. */
  firedBeforeInstant: number;
  /** Pairs received with more than one distinct run id: one fire made into two runs. */
  doubleFires: number;
  doubleFireExamples: Array<{ schedule: number; second: number; runIds: number }>;
  /** Receipts of expected pairs beyond the first of each. */
  extraReceipts: number;
  runIdsReceivedMoreThanOnce: number;
  receiptsWithAttemptAbove1: number;
  missingRunIdHeader: number;
  /** Receipts of created schedules whose scheduled-at is not a second of the window. */
  outsideWindow: { early: number; extra: number; offGrid: number; unreadable: number };
  /** /steady/<i> receipts for an i that was never created. */
  fromSchedulesNotCreated: number;
  /** Every /steady/ receipt. */
  receipts: number;
}

const MAX_EXAMPLES = 20;

export function analyseSteady(receipts: readonly SteadyReceipt[], created: ReadonlySet<number>, w: SteadyWindow): SteadyFigures {
  const D = w.seconds;
  const steady = receipts.filter((r) => r.kind === "steady");
  const outsideWindow = { early: 0, extra: 0, offGrid: 0, unreadable: 0 };
  let fromSchedulesNotCreated = 0;
  /** pair key (i·D + k) → its receipts, in arrival order. */
  const byPair = new Map<number, SteadyReceipt[]>();
  for (const r of steady) {
    if (r.index === null || !created.has(r.index)) {
      fromSchedulesNotCreated++;
      continue;
    }
    const slot = slotOf(r.scheduledAt, w);
    if ("outside" in slot) {
      outsideWindow[slot.outside]++;
      continue;
    }
    const key = r.index * D + slot.k;
    const list = byPair.get(key);
    if (list) list.push(r);
    else byPair.set(key, [r]);
  }

  const missedBySecond = new Array<number>(D).fill(0);
  const missedExamples: SteadyFigures["missedExamples"] = [];
  const schedulesWithMisses = new Set<number>();
  for (const { schedule, second } of expectedPairs(created, w)) {
    if (byPair.has(schedule * D + second)) continue;
    missedBySecond[second]!++;
    schedulesWithMisses.add(schedule);
    if (missedExamples.length < MAX_EXAMPLES) missedExamples.push({ schedule, second });
  }
  const missed = missedBySecond.reduce((a, b) => a + b, 0);

  const lags: number[] = [];
  const lagsBySecond: number[][] = Array.from({ length: D }, () => []);
  let extraReceipts = 0;
  let doubleFires = 0;
  const doubleFireExamples: SteadyFigures["doubleFireExamples"] = [];
  for (const [key, list] of byPair) {
    const second = key % D;
    const lag = Math.min(...list.map((r) => r.t)) - (w.T + second * 1_000);
    lags.push(lag);
    lagsBySecond[second]!.push(lag);
    extraReceipts += list.length - 1;
    const runIds = new Set(list.map((r) => r.runId)).size;
    if (runIds > 1) {
      doubleFires++;
      if (doubleFireExamples.length < MAX_EXAMPLES) doubleFireExamples.push({ schedule: (key - second) / D, second, runIds });
    }
  }
  const runIdCounts = new Map<string, number>();
  for (const list of byPair.values()) for (const r of list) if (r.runId) runIdCounts.set(r.runId, (runIdCounts.get(r.runId) ?? 0) + 1);
  const sortedBySecond = lagsBySecond.map((l) => Float64Array.from(l).sort());

  return {
    schedules: created.size,
    seconds: D,
    expectedPairs: created.size * D,
    receivedPairs: byPair.size,
    missed,
    missedBySecond,
    schedulesWithMisses: schedulesWithMisses.size,
    missedExamples,
    lagMs: summarize(lags),
    lagMsWithMissed: summarizeWithMissed(lags, missed),
    lagP50BySecond: sortedBySecond.map((l) => percentile(l, 50)),
    lagMaxBySecond: sortedBySecond.map((l) => (l.length ? l[l.length - 1]! : null)),
    firedBeforeInstant: lags.filter((x) => x < 0).length,
    doubleFires,
    doubleFireExamples,
    extraReceipts,
    runIdsReceivedMoreThanOnce: [...runIdCounts.values()].filter((n) => n > 1).length,
    receiptsWithAttemptAbove1: steady.filter((r) => r.attempt !== null && Number(r.attempt) > 1).length,
    missingRunIdHeader: steady.filter((r) => !r.runId).length,
    outsideWindow,
    fromSchedulesNotCreated,
    receipts: steady.length,
  };
}
