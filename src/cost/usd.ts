import type { Prices } from "./prices";

/** What the scheduler did in a window, in the units Cloudflare bills. */
export interface BilledCounts {
  doRequests: number;
  sqlRowsRead: number;
  sqlRowsWritten: number;
  queueMessages: number;
  d1RowsRead: number;
  d1RowsWritten: number;
}

export const NO_COUNTS: BilledCounts = {
  doRequests: 0,
  sqlRowsRead: 0,
  sqlRowsWritten: 0,
  queueMessages: 0,
  d1RowsRead: 0,
  d1RowsWritten: 0,
};

/** The counts at list prices, in dollars. */
export function usdOf(counts: BilledCounts, prices: Prices): number {
  const p = prices.usdPerMillion;
  const queueOperations = counts.queueMessages * prices.queueOperationsPerMessage;
  return (
    (counts.doRequests * p.doRequests +
      counts.sqlRowsRead * p.sqlRowsRead +
      counts.sqlRowsWritten * p.sqlRowsWritten +
      counts.d1RowsRead * p.d1RowsRead +
      counts.d1RowsWritten * p.d1RowsWritten +
      queueOperations * p.queueOperations) /
    1_000_000
  );
}

/** Each count divided by the runs it paid for; null when no run finished (nothing to divide by). */
export function perRun(counts: BilledCounts, runs: number): BilledCounts | null {
  if (runs <= 0) return null;
  const per = (n: number) => n / runs;
  return {
    doRequests: per(counts.doRequests),
    sqlRowsRead: per(counts.sqlRowsRead),
    sqlRowsWritten: per(counts.sqlRowsWritten),
    queueMessages: per(counts.queueMessages),
    d1RowsRead: per(counts.d1RowsRead),
    d1RowsWritten: per(counts.d1RowsWritten),
  };
}

/** Dollars a million runs would cost at the window's rate: what the window cost, scaled. */
export function usdPerMillionRuns(counts: BilledCounts, runs: number, prices: Prices): number | null {
  return runs <= 0 ? null : (usdOf(counts, prices) / runs) * 1_000_000;
}
