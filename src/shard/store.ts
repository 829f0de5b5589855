import { IN_FLIGHT_STATES, PENDING_STATES, sqlList, transition, UNFINISHED_STATES } from "../model/run-states";
import type { JobDefinition, RunRow, TenantSettings } from "../protocol/stored-rows";
import { chunksForStatement, placeholders, rowsForList } from "../sql";
import { AttemptStore } from "./attempt-store";
import { FiredThrough } from "./fired-through";
import { FrequentJobs } from "./frequent-jobs";
import { Leases } from "./leases";
import { PermitReleases } from "./permit-releases";
import { type RunToWrite, type ShardJob, toJob, toRun, toTenant, watchesOutcomes } from "./rows";
import { type AttemptChange, writeRunStep } from "./run-writes";

/**
 * Groups of states as SQL lists, from the state table (docs/architecture.md, run lifecycle).
 * Every per-job query over open runs says `finished_at IS NULL` as well, so that SQLite reads
 * the `runs_open` index, not the job's history.
 */
const UNFINISHED = sqlList(UNFINISHED_STATES);
const PENDING = sqlList(PENDING_STATES);
const IN_FLIGHT = sqlList(IN_FLIGHT_STATES);

/**
 * The shard's SQLite storage: one named operation per statement group. Every method is
 * synchronous (SQLite in a Durable Object is), so a caller that wraps several of them in
 * `transactionSync` gets one atomic change with no interleaving.
 */
export class ShardStore {
  private readonly tenants = new Map<string, TenantSettings | null>();
  /** Tenant permits runs gave back, to send to their gates after commit. */
  readonly permitReleases: PermitReleases;
  /** Jobs that fire at least once per claim timeout: their due times in memory. */
  readonly frequent: FrequentJobs;
  /** When leased attempts' leases end (leases.ts). */
  readonly leases: Leases;
  /** Runs' attempts: the latest on its run's row, earlier ones in `attempts`. */
  readonly attempts: AttemptStore;
  /** How far the alarm has fired through `jobs_next_due`: jobs before it have fired. */
  readonly firedThrough: FiredThrough;
  /** The jobs that watch their runs' outcomes; read once, then kept by putJob. */
  private watching: Set<string> | undefined;

  /** Over storage `migrateShard` has brought to the latest schema (`sql` may be the cost meter's, which counts each statement's rows). */
  constructor(private readonly sql: Pick<SqlStorage, "exec">) {
    this.permitReleases = new PermitReleases(sql);
    this.frequent = new FrequentJobs(sql);
    this.leases = new Leases(sql);
    this.attempts = new AttemptStore(sql);
    this.firedThrough = new FiredThrough(sql);
  }

  /** A change rolled back: what the store keeps in memory of jobs is read from storage again. */
  forgetKept(): void {
    this.leases.forget();
    this.frequent.forget();
    this.firedThrough.forget();
  }

  /** Retention removes runs: the alarm's position is written first (fired-through.ts: no restart fires a job whose run is gone). */
  beforeRemoval<T>(remove: () => T): T {
    this.firedThrough.write();
    return remove();
  }

  // ---- jobs ----

  /** A job as its row holds it, which is what runs need; its next fire as it stands is `firedThrough.live`'s. */
  getJob(id: string): ShardJob | null {
    const row = this.sql.exec("SELECT * FROM jobs WHERE id = ?", id).toArray()[0];
    return row ? toJob(row) : null;
  }

  getJobs(ids: string[]): ShardJob[] {
    return rowsForList(this.sql, ids, (list) => `SELECT * FROM jobs WHERE id IN (${list})`).map(toJob);
  }

  /** Inserts or replaces a job's definition; `fires`: its fire count (`maxRuns`), as it stands. */
  putJob(job: JobDefinition, nextFireAt: number | null, nextDueAt: number | null, fires: number): void {
    const watches = watchesOutcomes(job.spec) || Boolean(this.getTenant(job.tenantId)?.notify);
    this.watching?.[watches ? "add" : "delete"](job.id);
    this.sql.exec(
      `INSERT INTO jobs (id, tenant_id, version, spec, paused, deleted, created_at, next_fire_at, next_due_at, watches_outcomes, fires)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET version = excluded.version, spec = excluded.spec, paused = excluded.paused,
         deleted = excluded.deleted, next_fire_at = excluded.next_fire_at, next_due_at = excluded.next_due_at,
         watches_outcomes = excluded.watches_outcomes, fires = excluded.fires`,
      job.id,
      job.tenantId,
      job.version,
      JSON.stringify(job.spec),
      job.paused ? 1 : 0,
      job.deleted ? 1 : 0,
      job.createdAt,
      nextFireAt,
      this.firedThrough.dueTimeOf(job, nextDueAt),
      watches ? 1 : 0,
      fires,
    );
  }

  /**
   * Whether the job asks how its runs end (pauseAfterFailures, notify). Known from memory once
   * the shard read the short list of such jobs, so a run of any other job finishes without a read.
   */
  watchesOutcomes(jobId: string): boolean {
    this.watching ??= new Set(
      this.sql
        .exec("SELECT id FROM jobs WHERE watches_outcomes = 1")
        .toArray()
        .map((r) => r.id as string),
    );
    return this.watching.has(jobId);
  }

  /** Jobs whose next fire is due, earliest first: frequent ones from memory, others by their entries after the alarm's position. */
  dueJobs(now: number, limit: number): ShardJob[] {
    const others = this.firedThrough.dueJobs(now, limit);
    const frequent = this.frequent.due(now, limit);
    if (frequent.length === 0) return others;
    return [...others, ...frequent].sort((a, b) => (a.dueAt as number) - (b.dueAt as number)).slice(0, limit);
  }

  /** Moves a job that is not frequent to its next fire; `fires`: its fire count with the fires just made (its row's may be behind a run's). */
  setNextFire(jobId: string, nextFireAt: number | null, nextDueAt: number | null, fires: number): void {
    this.sql.exec(
      "UPDATE jobs SET next_fire_at = ?, next_due_at = ?, fires = ? WHERE id = ?",
      nextFireAt,
      this.firedThrough.dueTimeOf({ id: jobId, paused: false, deleted: false }, nextDueAt),
      fires,
      jobId,
    );
  }

  /** One more run of the job ended dead or failed: the streak it makes now. */
  extendFailureStreak(jobId: string): number {
    return this.sql.exec("UPDATE jobs SET failure_streak = failure_streak + 1 WHERE id = ? RETURNING failure_streak", jobId).one()
      .failure_streak as number;
  }

  /** A success, or a resume, ends the streak; nothing is written when there was none. */
  endFailureStreak(jobId: string): void {
    this.sql.exec("UPDATE jobs SET failure_streak = 0 WHERE id = ? AND failure_streak > 0", jobId);
  }

  // ---- runs ----

  getRun(id: string): RunRow | null {
    const row = this.sql.exec("SELECT * FROM runs WHERE id = ?", id).toArray()[0];
    return row ? toRun(row) : null;
  }

  getRuns(ids: string[]): RunRow[] {
    return rowsForList(this.sql, ids, (list) => `SELECT * FROM runs WHERE id IN (${list})`).map(toRun);
  }

  /**
   * Inserts a run: `running` (dispatched as it is made: its first attempt begins, leased until
   * `leaseUntil`; the caller sends its dispatch after commit), `queued` (a workflow run, which
   * begins its steps next), `waiting` (for admission), `buffered` (for the job's unfinished run)
   * or `skipped` (final). False, and nothing written, if the run exists: run ids are derived, so
   * a repeated fire is harmless.
   */
  createRun(
    run: RunToWrite,
    now: number,
    as:
      | { state: "running"; leaseUntil: number; completionToken: string }
      | { state: "queued" }
      | { state: "waiting" }
      | { state: "buffered" }
      | { state: "skipped"; reason: string },
  ): boolean {
    // Born running is born queued and dispatched in one step: the state table must allow both.
    if (as.state === "running" && transition("queued", "dispatch") !== "running")
      throw new Error("a run cannot be dispatched as it is made");
    const fence = run.fence ?? 1;
    const started = as.state === "running";
    const inserted = this.sql.exec(
      `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, catch_up, state, attempt, fence, due_at, created_at, finished_at, error, watched,
         parent_run_id, next_fire_at, next_due_at, next_version, next_fires,
         lease_until, started_at, a_number, a_fence, a_started_at, a_outcome, a_token)
       VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
      run.id,
      run.jobId,
      run.jobVersion,
      run.trigger,
      run.scheduledAt,
      run.catchUp ? 1 : 0,
      as.state,
      fence,
      as.state === "waiting" ? now : null,
      now,
      as.state === "skipped" ? now : null,
      as.state === "skipped" ? as.reason : null,
      run.watched ? 1 : 0,
      run.parentRunId ?? null,
      run.next?.fireAt ?? null,
      run.next?.dueAt ?? null,
      run.next?.version ?? null,
      run.next?.fires ?? null,
      started ? as.leaseUntil : null,
      started ? now : null,
      started ? 1 : null,
      started ? fence : null,
      started ? now : null,
      started ? "running" : null,
      started ? as.completionToken : null,
    ).rowsWritten;
    return inserted > 0;
  }

  /**
   * A job's runs that have not ended, oldest fire first: the ones an overlap policy looks at.
   * Sorted here, not by SQL: the few rows in runs_open are all read anyway. Only for a job
   * whose policies watch its open runs (`watchesOpenRuns`): others' are not in runs_open.
   */
  unfinishedRuns(jobId: string): RunRow[] {
    return this.sql
      .exec(`SELECT * FROM runs WHERE job_id = ? AND finished_at IS NULL AND watched = 1 AND state IN (${UNFINISHED})`, jobId)
      .toArray()
      .map(toRun)
      .sort((a, b) => a.scheduledAt - b.scheduledAt);
  }

  bufferedRuns(jobId?: string): RunRow[] {
    const rows =
      jobId === undefined
        ? this.sql.exec("SELECT * FROM runs WHERE state = 'buffered'")
        : this.sql.exec("SELECT * FROM runs WHERE state = 'buffered' AND job_id = ?", jobId);
    return rows.toArray().map(toRun);
  }

  /**
   * Runs of a job that have not started an attempt yet or wait for their next one: its watched
   * ones through runs_open; the others have a due time (a retry, an admission), found among the
   * shard's due runs (runs_due: work in hand, never history). A dispatched run is running: its
   * attempt has begun.
   */
  pendingRuns(jobId: string): RunRow[] {
    const watched = this.sql.exec(
      `SELECT * FROM runs WHERE job_id = ? AND finished_at IS NULL AND watched = 1 AND state IN (${PENDING})`,
      jobId,
    );
    const due = this.sql.exec(
      `SELECT * FROM runs WHERE due_at IS NOT NULL AND job_id = ? AND watched = 0 AND state IN (${PENDING})`,
      jobId,
    );
    return [...watched.toArray().map(toRun), ...due.toArray().map(toRun)];
  }

  /** A PATCH set an overlap policy or a limit: the job's open runs join runs_open (not a workflow's steps: their run does). */
  watchOpenRuns(jobId: string): void {
    this.sql.exec(
      "UPDATE runs SET watched = 1 WHERE due_at IS NOT NULL AND job_id = ? AND watched = 0 AND finished_at IS NULL AND parent_run_id IS NULL",
      jobId,
    );
    for (const chunk of chunksForStatement(this.leases.runsOf(jobId)))
      this.sql.exec(`UPDATE runs SET watched = 1 WHERE id IN (${placeholders(chunk.length)}) AND finished_at IS NULL`, ...chunk);
  }

  /** Runs whose due time has come (a retry, an admission's re-check, a breaker's wait). */
  dueRuns(now: number, limit: number): RunRow[] {
    return this.sql.exec("SELECT * FROM runs WHERE due_at <= ? ORDER BY due_at LIMIT ?", now, limit).toArray().map(toRun);
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

  /** When a waiting run is looked at again by the alarm (null: when one of its job's runs ends). */
  setDueAt(runId: string, dueAt: number | null): void {
    this.sql.exec("UPDATE runs SET due_at = ? WHERE id = ?", dueAt, runId);
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

  /** Writes a run's step as RunMoves (run-moves.ts) decided it (run-writes.ts). */
  writeRun(run: RunRow, next: RunRow, attempt?: AttemptChange): void {
    writeRunStep(this.sql, run, next, attempt);
  }

  /** A running attempt's lease moves (a heartbeat came): an unindexed column, one row written. */
  extendLease(runId: string, until: number): void {
    this.sql.exec("UPDATE runs SET lease_until = ? WHERE id = ? AND state = 'running'", until, runId);
  }

  // ---- tenants ----

  putTenant(t: TenantSettings): void {
    const before = this.getTenant(t.id);
    this.tenants.delete(t.id); // read again after the write (or after its rollback)
    const written = this.sql.exec(
      `INSERT INTO tenants (id, version, signing_generation, max_in_flight, retention_days, notify, legacy_signature)
         VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET version = excluded.version, signing_generation = excluded.signing_generation,
           max_in_flight = excluded.max_in_flight, retention_days = excluded.retention_days, notify = excluded.notify,
           legacy_signature = excluded.legacy_signature
         WHERE excluded.version > tenants.version`,
      t.id,
      t.version,
      t.signingGeneration,
      t.maxRunsInFlight,
      t.retentionDays ?? null,
      t.notify ? JSON.stringify(t.notify) : null,
      t.legacySignature === false ? 0 : 1,
    ).rowsWritten;
    // A default notification set or taken away changes which of the tenant's jobs watch their
    // outcomes: they are marked again (a rare change; it reads the tenant's jobs in this shard).
    if (written > 0 && Boolean(before?.notify) !== Boolean(t.notify)) {
      this.sql.exec(
        `UPDATE jobs SET watches_outcomes = CASE WHEN ?2 OR json_extract(spec, '$.notify') IS NOT NULL
           OR json_extract(spec, '$.pauseAfterFailures') IS NOT NULL OR json_extract(spec, '$.onSuccess') IS NOT NULL
           OR json_extract(spec, '$.onFailure') IS NOT NULL THEN 1 ELSE 0 END
         WHERE tenant_id = ?1`,
        t.id,
        t.notify ? 1 : 0,
      );
      this.watching = undefined;
    }
  }

  /** Asked once per run created and claimed; memoized, since only putTenant changes the table. */
  getTenant(id: string): TenantSettings | null {
    if (this.tenants.has(id)) return this.tenants.get(id)!;
    const row = this.sql.exec("SELECT * FROM tenants WHERE id = ?", id).toArray()[0];
    const tenant = row ? toTenant(row) : null;
    this.tenants.set(id, tenant);
    return tenant;
  }

  // ---- what the alarm waits for ----

  /** The earliest due instant of a live job's next fire. */
  earliestFire(): number | null {
    const other = this.firedThrough.earliest();
    const frequent = this.frequent.earliest();
    return other === null || frequent === null ? (other ?? frequent) : Math.min(other, frequent);
  }

  /** The earliest due time of any run (a retry, an admission, a breaker's wait) or lease. */
  earliestRunDue(): number | null {
    const run = this.sql.exec("SELECT MIN(due_at) AS t FROM runs WHERE due_at IS NOT NULL").one().t as number | null;
    const chunk = this.leases.earliest();
    return run === null || chunk === null ? (run ?? chunk) : Math.min(run, chunk);
  }

  /** A waiting run is due for admission. */
  hasDueWaiting(now: number): boolean {
    return this.sql.exec("SELECT 1 FROM runs WHERE state = 'waiting' AND due_at <= ? LIMIT 1", now).toArray().length > 0;
  }
}
