import type { WorkerCounts } from "../cost/d1-meter";
import { guard } from "./d1";

/** The Worker's cost counters in D1 (`cost_minutes`, migrations/0004_cost.sql), per minute and entry point. */

const MINUTE_MS = 60_000;

export interface WorkerCost {
  byOperation: Record<string, WorkerCounts & { calls: number }>;
  meter: { rowsRead: number; rowsWritten: number };
}

/** An isolate writes its counts at most this often: a write per request would double what an API call costs in D1. */
const FLUSH_EVERY_MS = 10_000;

interface Pending extends WorkerCounts {
  minute: number;
  operation: string;
  calls: number;
}

/** Counts of this isolate not yet written, by minute and entry point. */
const pending = new Map<string, Pending>();
let lastFlush = 0;
/** Minutes kept: the longest window metrics may ask for, and a margin (as the shards keep theirs). */
const KEEP_MINUTES = 25 * 60;
let prunedHour = 0;
/** What the last write of this isolate cost, written with its next one (known only after it ran). */
let carried = { rowsRead: 0, rowsWritten: 0 };

/**
 * Adds one invocation's counts to this isolate's tally; returns the write when one is due
 * (for `waitUntil`), else null. Counts of an isolate evicted before its next write are lost:
 * the meter can only undercount.
 */
export function recordWorkerCost(db: D1Database, operation: string, counts: WorkerCounts, now: number): Promise<void> | null {
  const minute = Math.floor(now / MINUTE_MS);
  const key = `${minute} ${operation}`;
  const row = pending.get(key) ?? { minute, operation, calls: 0, rowsRead: 0, rowsWritten: 0, gateRequests: 0 };
  row.calls++;
  row.rowsRead += counts.rowsRead;
  row.rowsWritten += counts.rowsWritten;
  row.gateRequests += counts.gateRequests;
  pending.set(key, row);
  return now - lastFlush >= FLUSH_EVERY_MS ? flushWorkerCost(db, now) : null;
}

/** Forgets when this isolate last wrote and pruned, as a fresh isolate would (for tests). */
export function forgetCostWrites(): void {
  lastFlush = 0;
  prunedHour = 0;
}

/** Writes this isolate's tally: one upsert per minute and entry point, in one batch. */
export async function flushWorkerCost(db: D1Database, now: number): Promise<void> {
  lastFlush = now;
  const rows = [...pending.values()];
  pending.clear();
  if (rows.length === 0) return;
  const own = carried;
  carried = { rowsRead: 0, rowsWritten: 0 };
  const upsert = db.prepare(
    `INSERT INTO cost_minutes (minute, operation, calls, rows_read, rows_written, gate_requests, meter_rows_read, meter_rows_written)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (minute, operation) DO UPDATE SET calls = calls + excluded.calls, rows_read = rows_read + excluded.rows_read,
       rows_written = rows_written + excluded.rows_written, gate_requests = gate_requests + excluded.gate_requests,
       meter_rows_read = meter_rows_read + excluded.meter_rows_read, meter_rows_written = meter_rows_written + excluded.meter_rows_written`,
  );
  // Once an hour per isolate, the minutes past keeping go, in the same batch: a range of the key.
  const hour = Math.floor(now / 3_600_000);
  const prune =
    hour > prunedHour ? [db.prepare("DELETE FROM cost_minutes WHERE minute < ?").bind(Math.floor(now / MINUTE_MS) - KEEP_MINUTES)] : [];
  prunedHour = hour;
  const results = await guard("record cost", () =>
    db.batch([
      ...prune,
      ...rows.map((r, i) =>
        upsert.bind(
          r.minute,
          r.operation,
          r.calls,
          r.rowsRead,
          r.rowsWritten,
          r.gateRequests,
          i === 0 ? own.rowsRead : 0,
          i === 0 ? own.rowsWritten : 0,
        ),
      ),
    ]),
  );
  for (const result of results) {
    carried.rowsRead += result.meta.rows_read;
    carried.rowsWritten += result.meta.rows_written;
  }
}

/** The counters of the minutes from `since` on (whole minutes). */
export async function workerCost(db: D1Database, since: number): Promise<WorkerCost> {
  // This isolate's own tally first, so that a reader sees at least what it counted itself.
  await flushWorkerCost(db, Date.now());
  const { results } = await guard("read cost", () =>
    db
      .prepare(
        `SELECT operation, SUM(calls) AS calls, SUM(rows_read) AS rows_read, SUM(rows_written) AS rows_written,
           SUM(gate_requests) AS gate_requests, SUM(meter_rows_read) AS meter_rows_read, SUM(meter_rows_written) AS meter_rows_written
         FROM cost_minutes WHERE minute >= ? GROUP BY operation`,
      )
      .bind(Math.floor(since / MINUTE_MS))
      .all<Record<string, number | string>>(),
  );
  const byOperation: WorkerCost["byOperation"] = {};
  const meter = { rowsRead: 0, rowsWritten: 0 };
  for (const r of results) {
    byOperation[r.operation as string] = {
      calls: r.calls as number,
      rowsRead: r.rows_read as number,
      rowsWritten: r.rows_written as number,
      gateRequests: r.gate_requests as number,
    };
    meter.rowsRead += r.meter_rows_read as number;
    meter.rowsWritten += r.meter_rows_written as number;
  }
  return { byOperation, meter };
}
