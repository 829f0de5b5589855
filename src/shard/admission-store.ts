import { IN_FLIGHT_STATES, sqlList } from "../model/run-states";
import type { RunRow } from "../protocol/stored-rows";
import { toRun } from "./rows";

const IN_FLIGHT = sqlList(IN_FLIGHT_STATES);

/**
 * The SQL of admission (admitter.ts): the waiting runs it looks at, the in-flight count a job's
 * maxConcurrency is held to, a rate's next slot, and the wake-ups that make waiting runs due
 * again (a tenant's gate freed capacity; a run of the job stopped being in flight, as
 * run-moves.ts finds). A waiting run's due time is when it is looked at again (`setDueAt` in
 * store.ts, shared with the ledger's due runs). Per-job queries say `finished_at IS NULL` so that
 * SQLite reads the `runs_open` index, not the job's history.
 */
export class AdmissionStore {
  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** A waiting run is due for admission. */
  hasDueWaiting(now: number): boolean {
    return this.sql.exec("SELECT 1 FROM runs WHERE state = 'waiting' AND due_at <= ? LIMIT 1", now).toArray().length > 0;
  }
  /**
   * Waiting runs due for admission, earliest first. Runs deferred to a later time are left out,
   * so that one job's long backlog cannot keep every other job's runs from being looked at.
   */
  waitingRuns(now: number, limit: number): RunRow[] {
    return this.sql
      .exec("SELECT * FROM runs WHERE state = 'waiting' AND due_at <= ? ORDER BY due_at, scheduled_at, id LIMIT ?", now, limit)
      .toArray()
      .map(toRun);
  }

  /** Capacity may have freed (a tenant's gate said so): every waiting run is looked at now. */
  dueAllWaiting(now: number): void {
    this.sql.exec("UPDATE runs SET due_at = ? WHERE state = 'waiting' AND due_at > ?", now, now);
  }

  /** A job's runs dispatched or running: what its maxConcurrency counts. */
  inFlightCount(jobId: string): number {
    return this.sql
      .exec(`SELECT COUNT(*) AS n FROM runs WHERE job_id = ? AND finished_at IS NULL AND watched = 1 AND state IN (${IN_FLIGHT})`, jobId)
      .one().n as number;
  }

  setRateNext(jobId: string, at: number): void {
    this.sql.exec("UPDATE jobs SET rate_next_at = ? WHERE id = ?", at, jobId);
  }

  /** A job's waiting runs (held by maxConcurrency) are due now: one of its runs stopped being in flight. */
  wakeWaiting(jobId: string, now: number): void {
    this.sql.exec(
      "UPDATE runs SET due_at = ?1 WHERE job_id = ?2 AND finished_at IS NULL AND watched = 1 AND state = 'waiting' AND due_at > ?1",
      now,
      jobId,
    );
  }
}
