import type { AttemptRow, RunRow } from "../protocol/stored-rows";
import { latestAttemptOf, toAttempt, toRun } from "./rows";

/**
 * The SQL of an attempt's outcome (completion.ts, and the ledger's lease ends): a report's read
 * of its run and attempt, a 202, a heartbeat, a late answer. The latest attempt is on its run's
 * row (the `a_*` columns), earlier ones in `attempts` (moved there when the next begins:
 * `writeRunStep` in run-writes.ts, which also writes the outcome itself), both in the view
 * `attempt_log`.
 */
export class AttemptStore {
  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** The target answered 202: the attempt goes on outside edgecron until it completes, under a new lease. */
  accept(runId: string, fence: number, status: number, leaseUntil: number): void {
    this.sql.exec(
      "UPDATE runs SET a_outcome = 'accepted', a_status = ?, lease_until = ? WHERE id = ? AND a_fence = ? AND a_outcome = 'running'",
      status,
      leaseUntil,
      runId,
      fence,
    );
  }

  /** A running attempt's lease moves (a heartbeat came): an unindexed column, one row written. */
  extendLease(runId: string, until: number): void {
    this.sql.exec("UPDATE runs SET lease_until = ? WHERE id = ? AND state = 'running'", until, runId);
  }

  /** Keeps a late outcome on the attempt it belongs to, so the run shows it happened. */
  noteLate(runId: string, fence: number, description: string): void {
    const onRow = this.sql.exec("UPDATE runs SET a_late = ? WHERE id = ? AND a_fence = ?", description, runId, fence).rowsWritten;
    if (onRow === 0) this.sql.exec("UPDATE attempts SET late = ? WHERE run_id = ? AND fence = ?", description, runId, fence);
  }

  /**
   * A run and its attempt of `fence`, in one read when that is the latest attempt (kept on the
   * run's row), as it is for every outcome that is not stale: a report's hot path.
   */
  runAndAttempt(runId: string, fence: number): { run: RunRow | null; attempt: AttemptRow | null } {
    const row = this.sql.exec("SELECT * FROM runs WHERE id = ?", runId).toArray()[0];
    if (!row) return { run: null, attempt: null };
    const latest = latestAttemptOf(row);
    return { run: toRun(row), attempt: latest?.fence === fence ? latest : this.get(runId, fence) };
  }

  get(runId: string, fence: number): AttemptRow | null {
    const row = this.sql.exec("SELECT * FROM attempt_log WHERE run_id = ? AND fence = ?", runId, fence).toArray()[0];
    return row ? toAttempt(row) : null;
  }
}
