/**
 * Alarm lag's buckets, and counts in them: a pure table, shared by the shard that counts and the
 * Worker that sums and exposes them (armed-alarm.ts measures).
 *
 * Alarm lag: how late a shard's alarm starts, from the moment it could first have run (the
 * time it was set for, or the time it was set when that is later) to the start of `alarm()`,
 * on the shard's clock. Late or lost alarms are a known failure of SQLite-backed objects (the
 * sweep's `assertAlarm` exists for them); this shows how late the ones that came were.
 *
 * Kept as a histogram of fixed buckets, counted where it is measured: the meter adds the counts
 * to the row it writes anyway (meter.ts), so an alarm costs no row of its own, and bucket
 * counts add up over minutes and over shards. A summary would not: quantiles of one shard's
 * minute cannot be combined into the window's over every shard.
 */

/**
 * Upper bounds, in ms. Measured on workerd locally, an alarm starts about 7 ms after its time;
 * the bounds go from on time (10 ms) to five minutes: by then the sweep, which re-asserts each
 * shard's alarm once a pass (a minute, for a small catalog), has usually run the due work itself.
 */
export const ALARM_LAG_BOUNDS_MS = [10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000, 300_000] as const;

/** `counts[i]`: lags above the bound before `ALARM_LAG_BOUNDS_MS[i]` and at most it; the last, above every bound. */
export interface LagCounts {
  counts: number[];
  sumMs: number;
}

/**
 * The columns of `cost_minutes` that held them (shard schema step 10), in `counts` order, then
 * the sum; a tally (meter.ts) keeps them in that order since step 18. Those steps write them
 * out by hand: a change of bounds needs a step of its own.
 */
export const ALARM_LAG_COLUMNS = [
  ...ALARM_LAG_BOUNDS_MS.map((ms) => `alarm_lag_le_${ms}ms`),
  "alarm_lag_above",
  "alarm_lag_sum_ms",
] as const;

export const noLags = (): LagCounts => ({ counts: new Array<number>(ALARM_LAG_BOUNDS_MS.length + 1).fill(0), sumMs: 0 });

export function countLag(into: LagCounts, lagMs: number): void {
  const i = ALARM_LAG_BOUNDS_MS.findIndex((bound) => lagMs <= bound);
  into.counts[i === -1 ? ALARM_LAG_BOUNDS_MS.length : i]! += 1;
  into.sumMs += lagMs;
}

export function addLags(into: LagCounts, more: LagCounts): void {
  for (let i = 0; i < into.counts.length; i++) into.counts[i]! += more.counts[i] ?? 0;
  into.sumMs += more.sumMs;
}

/** The values to store, in ALARM_LAG_COLUMNS order. */
export const lagColumnValues = (lags: LagCounts): number[] => [...lags.counts, lags.sumMs];

/** Read back from values in ALARM_LAG_COLUMNS order (`lagColumnValues`); a missing value counts 0. */
export const lagsOfValues = (values: readonly number[]): LagCounts => {
  const all = ALARM_LAG_COLUMNS.map((_, i) => values[i] ?? 0);
  return { counts: all.slice(0, -1), sumMs: all.at(-1)! };
};
