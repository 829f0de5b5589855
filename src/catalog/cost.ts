import type { WorkerCounts } from "../cost/d1-meter";
import { guard } from "./d1";

/** The Worker's cost counters in D1 (`cost_minutes`, migrations/0004_cost.sql), per minute and entry point. */

const MINUTE_MS = 60_000;

export interface WorkerCost {
  byOperation: Record<string, WorkerCounts & { calls: number }>;
  meter: { rowsRead: number; rowsWritten: number };
}

/** What the last write of this isolate cost, written with its next one (known only after it ran). */
let carried = { rowsRead: 0, rowsWritten: 0 };

/** Adds one invocation's counts to its minute's row: one upsert, one row written. */
export async function recordWorkerCost(db: D1Database, operation: string, counts: WorkerCounts, now: number): Promise<void> {
  const own = carried;
  carried = { rowsRead: 0, rowsWritten: 0 };
  const result = await guard("record cost", () =>
    db
      .prepare(
        `INSERT INTO cost_minutes (minute, operation, calls, rows_read, rows_written, gate_requests, meter_rows_read, meter_rows_written)
         VALUES (?, ?, 1, ?, ?, ?, ?, ?)
         ON CONFLICT (minute, operation) DO UPDATE SET calls = calls + 1, rows_read = rows_read + excluded.rows_read,
           rows_written = rows_written + excluded.rows_written, gate_requests = gate_requests + excluded.gate_requests,
           meter_rows_read = meter_rows_read + excluded.meter_rows_read, meter_rows_written = meter_rows_written + excluded.meter_rows_written`,
      )
      .bind(Math.floor(now / MINUTE_MS), operation, counts.rowsRead, counts.rowsWritten, counts.gateRequests, own.rowsRead, own.rowsWritten)
      .run(),
  );
  carried.rowsRead += result.meta.rows_read;
  carried.rowsWritten += result.meta.rows_written;
}

/** The counters of the minutes from `since` on (whole minutes). */
export async function workerCost(db: D1Database, since: number): Promise<WorkerCost> {
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
