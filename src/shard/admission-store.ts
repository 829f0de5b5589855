import { IN_FLIGHT_STATES, sqlList } from "../model/run-states";
import type { RunRow } from "../protocol/stored-rows";
import { toRun } from "./rows";

const IN_FLIGHT = sqlList(IN_FLIGHT_STATES);

/**
 * The SQL of admission (admitter.ts): the waiting runs it looks at, the in-flight count a job's
 * maxConcurrency is held to, a rate's next slot, and the wake-ups that make waiting runs due
 * again (a run of the job stopped being in flight, as run-moves.ts finds). A waiting run's due
 * time is when it is looked at again (`setDueAt` in store.ts, shared with the ledger's due
 * runs). A waiting run its tenant's gate refused is parked instead: no due time, in
 * `runs_parked` under its tenant, oldest first, until the gate frees places (schema step 23);
 * `admission_waits` holds each parked tenant's backstop re-check. Per-job queries say
 * `finished_at IS NULL` so that SQLite reads the `runs_open` index, not the job's history.
 */
export class AdmissionStore {
  /**
   * Whether `admission_waits` may hold a row: read when not known, set by every write of one
   * (a write rolled back leaves it set, which costs a statement, never a miss). A shard whose
   * tenants have no limit so never reads the table when its alarm is armed.
   */
  private mayWait: boolean | undefined;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** A waiting run is due for admission. */
  hasDueWaiting(now: number): boolean {
    return this.sql.exec("SELECT 1 FROM runs WHERE state = 'waiting' AND due_at <= ? LIMIT 1", now).toArray().length > 0;
  }
  /**
   * Waiting runs due for admission, earliest first. Runs deferred to a later time are left out,
   * so that one job's long backlog cannot keep every other job's runs from being looked at.
   * Ordered as the index is (due time, then id: a job's runs by their instant), so that a page
   * reads `limit` rows: a tie broken by another column sorts every run due at that instant,
   * a burst's thousands, at every pass.
   */
  waitingRuns(now: number, limit: number): RunRow[] {
    return this.sql
      .exec("SELECT * FROM runs WHERE state = 'waiting' AND due_at <= ? ORDER BY due_at, id LIMIT ?", now, limit)
      .toArray()
      .map(toRun);
  }

  /**
   * Capacity may have freed for every job (a group's place, a tenant's changed limit): the
   * waiting runs deferred to a later time are looked at now. Parked runs have no due time and
   * are left: only their tenant's gate, or its backstop, takes them (`parkedHead`).
   */
  dueAllWaiting(now: number): void {
    this.sql.exec("UPDATE runs SET due_at = ? WHERE state = 'waiting' AND due_at > ?", now, now);
  }

  // ---- runs parked at their tenant's gate ----

  /** A waiting run the gate refused, or would: out of the due runs, at its tenant's tail in the order it came due, and in runs_open (where a pause finds it, having no due time). */
  park(runId: string, tenantId: string, since: number): void {
    this.sql.exec(
      "UPDATE runs SET due_at = NULL, parked_tenant = ?, waiting_since = ? WHERE id = ? AND state = 'waiting'",
      tenantId,
      since,
      runId,
    );
    // Apart, and only when it is not: setting the column, even to its value, is a row more (docs/cost.md).
    this.sql.exec("UPDATE runs SET watched = 1 WHERE id = ? AND watched = 0", runId);
  }

  /** The tenant's `limit` longest-parked runs: what a wake-up for that many places reads, and no more. */
  parkedHead(tenantId: string, limit: number): RunRow[] {
    return this.sql
      .exec(
        "SELECT * FROM runs WHERE parked_tenant = ? AND state = 'waiting' AND due_at IS NULL ORDER BY waiting_since, id LIMIT ?",
        tenantId,
        limit,
      )
      .toArray()
      .map(toRun);
  }

  hasParked(tenantId: string): boolean {
    return (
      this.sql.exec("SELECT 1 FROM runs WHERE parked_tenant = ? AND state = 'waiting' AND due_at IS NULL LIMIT 1", tenantId).toArray()
        .length > 0
    );
  }

  /** The tenant's limit is gone: every parked run of it is due now (once; the gate no longer holds them). */
  unparkAll(tenantId: string, now: number): void {
    this.sql.exec("UPDATE runs SET due_at = ? WHERE parked_tenant = ? AND state = 'waiting' AND due_at IS NULL", now, tenantId);
  }

  /** The tenants that have runs parked here, with their backstop's state. */
  waits(): Map<string, { recheckAt: number; backoffMs: number }> {
    if (this.mayWait === false) return new Map();
    const rows = this.sql.exec("SELECT tenant_id, recheck_at, backoff_ms FROM admission_waits").toArray();
    this.mayWait = rows.length > 0;
    return new Map(rows.map((r) => [r.tenant_id as string, { recheckAt: r.recheck_at as number, backoffMs: r.backoff_ms as number }]));
  }

  setWait(tenantId: string, recheckAt: number, backoffMs: number): void {
    this.mayWait = true;
    this.sql.exec(
      "INSERT INTO admission_waits (tenant_id, recheck_at, backoff_ms) VALUES (?, ?, ?) ON CONFLICT (tenant_id) DO UPDATE SET recheck_at = excluded.recheck_at, backoff_ms = excluded.backoff_ms",
      tenantId,
      recheckAt,
      backoffMs,
    );
  }

  endWait(tenantId: string): void {
    this.sql.exec("DELETE FROM admission_waits WHERE tenant_id = ?", tenantId);
  }

  /** The earliest backstop re-check of a parked tenant, or null. */
  earliestWait(): number | null {
    if (this.mayWait === false) return null;
    const at = this.sql.exec("SELECT MIN(recheck_at) AS t FROM admission_waits").one().t as number | null;
    if (at === null) this.mayWait = false;
    return at;
  }

  /** A change rolled back: whether a wait exists is read again. */
  forget(): void {
    this.mayWait = undefined;
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
