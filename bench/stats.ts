/** The statistics the bench reports: nearest-rank percentiles and how batches overlapped in time. */

export interface Summary {
  count: number;
  min: number | null;
  p50: number | null;
  p90: number | null;
  p99: number | null;
  max: number | null;
  mean: number | null;
}

export const round = (x: number | null | undefined, digits = 1): number | null =>
  x === null || x === undefined || Number.isNaN(x) ? null : Number(x.toFixed(digits));

/** Nearest-rank percentile of an ascending array; null when empty. */
export function percentile(sorted: ArrayLike<number>, p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export function summarize(values: Iterable<number>): Summary {
  const sorted = Float64Array.from(values).sort();
  const n = sorted.length;
  return {
    count: n,
    min: n ? sorted[0]! : null,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: n ? sorted[n - 1]! : null,
    mean: n ? round(sorted.reduce((a, b) => a + b, 0) / n) : null,
  };
}

/** A percentile that falls among the fires never received: their lag is counted as infinite. */
export const MISSED = "missed" as const;
export type LagOrMissed = number | typeof MISSED;

/** The lag percentiles over every expected fire, each missed one counted as an infinite lag. */
export interface SummaryWithMissed {
  /** Expected fires: received + missed. */
  count: number;
  missed: number;
  p50: LagOrMissed | null;
  p90: LagOrMissed | null;
  p99: LagOrMissed | null;
  max: LagOrMissed | null;
}

/**
 * Nearest-rank percentiles of `received` lags and `missed` infinite ones: a p99 over 10,000 fires
 * of which 101 never arrived is `missed`, however fast the other 9,899 were.
 */
export function summarizeWithMissed(received: Iterable<number>, missed: number): SummaryWithMissed {
  const sorted = Float64Array.from(received).sort();
  const count = sorted.length + missed;
  const at = (p: number): LagOrMissed | null => {
    if (count === 0) return null;
    const rank = Math.min(count - 1, Math.max(0, Math.ceil((p / 100) * count) - 1));
    return rank < sorted.length ? sorted[rank]! : MISSED;
  };
  return { count, missed, p50: at(50), p90: at(90), p99: at(99), max: at(100) };
}

/** [start, end] in ms. */
export type Interval = readonly [number, number];

/** The most intervals open at one instant (an interval ending where another starts does not overlap it). */
export function maxOverlap(intervals: readonly Interval[]): number {
  const events = intervals.flatMap(([start, end]) => [
    [start, 1],
    [end, -1],
  ]) as Array<[number, 1 | -1]>;
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0;
  let most = 0;
  for (const [, step] of events) {
    open += step;
    most = Math.max(most, open);
  }
  return most;
}

/** The length of the union of the intervals: how long at least one was open. */
export function coveredMs(intervals: readonly Interval[]): number {
  let total = 0;
  let end = -Infinity;
  for (const [s, e] of [...intervals].sort((a, b) => a[0] - b[0])) {
    if (e <= end) continue;
    total += e - Math.max(s, end);
    end = e;
  }
  return total;
}

/** Counts per 1-second bucket from 0; negative values count in the first. */
export function perSecond(values: Iterable<number>): number[] {
  const buckets: number[] = [];
  for (const v of values) {
    const s = Math.max(0, Math.floor(v / 1000));
    buckets[s] = (buckets[s] ?? 0) + 1;
  }
  return Array.from(buckets, (n) => n ?? 0);
}
