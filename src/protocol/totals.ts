/**
 * What a shard has counted since its storage was created: the figures GET /metrics serves as
 * Prometheus counters and cumulative histograms (`_total`, `_bucket`), which only ever grow, so
 * that `rate()` and `histogram_quantile()` over them mean what Prometheus users expect. Pure: a
 * shape, its sum over shards, and its stored form; counters.ts keeps them, meter.ts writes them.
 *
 * Histograms are fixed buckets counted where the value is measured, like alarm-lag.ts's: bucket
 * counts add up over time and over shards, quantiles would not.
 */
import { addLags, type LagCounts, noLags } from "./alarm-lag";

/**
 * Fire lag's upper bounds, in ms: sub-second on a healthy shard, minutes when a backlog builds.
 * Stored by position (`encodeTotals`): a change of bounds starts the histogram again, which is
 * what a Prometheus user must be told anyway (its old buckets mean something else).
 */
export const FIRE_LAG_BOUNDS_MS = [50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000] as const;

/** Counts above the bound before `bounds[i]` and at most it (`counts[i]`), then one more for those above the last bound. */
export interface Buckets {
  counts: number[];
  sumMs: number;
}

export interface ShardTotals {
  /** Runs that reached a final state, by that state (a revived run counts again when it ends again); workflow steps left out. */
  runsFinished: Record<string, number>;
  /** Attempts that ended, by outcome (a workflow step's too). */
  attempts: Record<string, number>;
  /** Scheduled instant to first dispatch of scheduled runs, on the shard's clock (the same runs as the window's fire lag). */
  fireLag: Buckets;
  /** How late the shard's alarms started (alarm-lag.ts), retries left out. */
  alarmLag: LagCounts;
  /** Dispatches made: a run's first, a retry's, a revival's, a resend when its lease ended or after the Queue dead-lettered it. */
  dispatches: number;
  /** Dispatches sent again under the same fence because their claim deadline passed (invariant 5). */
  redispatches: number;
  /** Attempts that failed and left their run waiting for another (`retry_wait`). */
  retries: number;
  /** Dispatches the Queue dead-lettered, which the shard sent again (`abandon`). */
  queueDeadLetters: number;
  /** Times the shard object was constructed (meter.ts, `countStart`). */
  starts: number;
}

const noFireLags = (): Buckets => ({ counts: new Array<number>(FIRE_LAG_BOUNDS_MS.length + 1).fill(0), sumMs: 0 });

export const noTotals = (): ShardTotals => ({
  runsFinished: {},
  attempts: {},
  fireLag: noFireLags(),
  alarmLag: noLags(),
  dispatches: 0,
  redispatches: 0,
  retries: 0,
  queueDeadLetters: 0,
  starts: 0,
});

export function countFireLag(into: Buckets, lagMs: number): void {
  const i = FIRE_LAG_BOUNDS_MS.findIndex((bound) => lagMs <= bound);
  into.counts[i === -1 ? FIRE_LAG_BOUNDS_MS.length : i]! += 1;
  into.sumMs += lagMs;
}

/** Adds `more` into `into`: one shard's counts since its last write to what it stored, or every shard's together. */
export function addTotals(into: ShardTotals, more: ShardTotals): ShardTotals {
  for (const key of ["runsFinished", "attempts"] as const) {
    for (const [k, n] of Object.entries(more[key])) into[key][k] = (into[key][k] ?? 0) + n;
  }
  for (let i = 0; i < into.fireLag.counts.length; i++) into.fireLag.counts[i]! += more.fireLag.counts[i] ?? 0;
  into.fireLag.sumMs += more.fireLag.sumMs;
  addLags(into.alarmLag, more.alarmLag);
  for (const key of ["dispatches", "redispatches", "retries", "queueDeadLetters", "starts"] as const) into[key] += more[key];
  return into;
}

/**
 * The stored form, on the meter's row (`cost_tallies.totals`, shard schema step 19): the shape
 * as JSON, histograms as their counts then their sum. Read back leniently: a field a later
 * release added, or bounds of another length, count from 0 rather than fail the shard.
 */
export function encodeTotals(t: ShardTotals): string {
  return JSON.stringify({ ...t, fireLag: [...t.fireLag.counts, t.fireLag.sumMs], alarmLag: [...t.alarmLag.counts, t.alarmLag.sumMs] });
}

export function decodeTotals(text: string): ShardTotals {
  const raw = JSON.parse(text) as Partial<Record<keyof ShardTotals, unknown>>;
  const t = noTotals();
  const histogram = (into: Buckets, values: unknown) => {
    if (!Array.isArray(values) || values.length !== into.counts.length + 1) return;
    into.counts = values.slice(0, -1).map(Number);
    into.sumMs = Number(values.at(-1));
  };
  const record = (value: unknown) =>
    Object.fromEntries(Object.entries((value ?? {}) as Record<string, unknown>).map(([k, n]) => [k, Number(n)]));
  t.runsFinished = record(raw.runsFinished);
  t.attempts = record(raw.attempts);
  histogram(t.fireLag, raw.fireLag);
  histogram(t.alarmLag, raw.alarmLag);
  for (const key of ["dispatches", "redispatches", "retries", "queueDeadLetters", "starts"] as const) t[key] = Number(raw[key] ?? 0);
  return t;
}
