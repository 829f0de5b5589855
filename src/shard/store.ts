import type { JobSpec } from "../model/job";
import type { AttemptRow, Dispatch, JobDefinition, RunRow, ShardMetrics, TenantSettings } from "./contract";
import {
  IN_FLIGHT_STATES,
  RUN_STATE_SQL_LIST,
  RUN_TRIGGER_SQL_LIST,
  type RUN_TRIGGERS,
  type RunEvent,
  type RunState,
  transition,
} from "./run-states";

/**
 * The shard's SQLite storage: one named operation per statement group. Every method is
 * synchronous (SQLite in a Durable Object is), so a caller that wraps several of them in
 * `transactionSync` gets one atomic change with no interleaving.
 */

/** The runs table, by name: created as `runs`, or beside it when an upgrade rebuilds it. */
const runsTable = (name: string) => `
CREATE TABLE IF NOT EXISTS ${name} (
  id TEXT PRIMARY KEY,
  job_id TEXT NOT NULL,
  job_version INTEGER NOT NULL,
  trigger TEXT NOT NULL CHECK (trigger IN (${RUN_TRIGGER_SQL_LIST})),
  scheduled_at INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN (${RUN_STATE_SQL_LIST})),
  attempt INTEGER NOT NULL,          -- the attempt being dispatched or run (1-based)
  fence INTEGER NOT NULL,            -- bumped on every dispatch; only the current one may claim or report
  due_at INTEGER,                    -- when the alarm must look at this run again; null once final
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER,
  status INTEGER,
  error TEXT,
  result TEXT,                       -- what a long-running target sent with its completion
  catch_up INTEGER NOT NULL DEFAULT 0, -- the fire was missed and this run catches it up
  permit TEXT                        -- the tenant run-in-flight permit it holds (its grant key), if any
);`;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL DEFAULT 'default',
  version INTEGER NOT NULL,
  spec TEXT NOT NULL,
  paused INTEGER NOT NULL,
  deleted INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  next_fire_at INTEGER,              -- the next fire's nominal instant (what its run is scheduled at)
  next_due_at INTEGER,               -- when it is acted on: next_fire_at plus the job's jitter offset
  fires INTEGER NOT NULL DEFAULT 0,  -- scheduled fires so far, for maxRuns
  rate_next_at INTEGER               -- ratePerSecond: the earliest the job's next run may be admitted
);
CREATE INDEX IF NOT EXISTS jobs_next_due ON jobs (next_due_at) WHERE next_due_at IS NOT NULL;
${runsTable("runs")}
CREATE INDEX IF NOT EXISTS runs_waiting ON runs (due_at) WHERE state = 'waiting';
CREATE INDEX IF NOT EXISTS runs_buffered ON runs (job_id) WHERE state = 'buffered';
CREATE INDEX IF NOT EXISTS runs_dead_letters ON runs (finished_at DESC, id DESC) WHERE state IN ('dead', 'failed');
CREATE INDEX IF NOT EXISTS runs_due ON runs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_by_job ON runs (job_id, scheduled_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS attempts (
  run_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  fence INTEGER NOT NULL,
  started_at INTEGER NOT NULL,
  finished_at INTEGER,
  outcome TEXT NOT NULL,
  status INTEGER,
  error TEXT,
  completion_token TEXT NOT NULL,    -- the target's credential for /complete and /heartbeat
  late TEXT,                         -- an outcome that arrived after the attempt was given up on
  PRIMARY KEY (run_id, fence)
);
CREATE TABLE IF NOT EXISTS outbox (
  run_id TEXT NOT NULL,
  fence INTEGER NOT NULL,
  PRIMARY KEY (run_id, fence)
);
-- Tenants of this shard's jobs, as the catalog last said: how to sign, how many may be in flight.
CREATE TABLE IF NOT EXISTS tenants (
  id TEXT PRIMARY KEY,
  version INTEGER NOT NULL,
  signing_generation INTEGER NOT NULL,
  max_in_flight INTEGER
);
-- Permits to give back to tenant gates: an outbox too, written with the run's change.
CREATE TABLE IF NOT EXISTS permit_releases (permit TEXT PRIMARY KEY, tenant_id TEXT NOT NULL);
`;

/** Columns added after a table was first created: a shard created before them gains them on start. */
const ADDED_COLUMNS: Array<[table: string, column: string, definition: string]> = [
  ["jobs", "tenant_id", "TEXT NOT NULL DEFAULT 'default'"],
  ["jobs", "rate_next_at", "INTEGER"],
  ["runs", "catch_up", "INTEGER NOT NULL DEFAULT 0"],
  ["runs", "permit", "TEXT"],
];

/**
 * Brings a shard created by an earlier release up to this schema. Columns are added in place;
 * the runs table's CHECK on states cannot be altered, so when the state list grew the table is
 * rebuilt. The caller runs this in a transaction: an interrupted upgrade leaves nothing half done.
 */
function upgrade(sql: SqlStorage): void {
  const tableSql = (name: string) =>
    sql.exec("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", name).toArray()[0]?.sql as string | undefined;
  for (const [table, column, definition] of ADDED_COLUMNS) {
    const has = sql.exec("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", table, column).toArray().length > 0;
    if (tableSql(table) !== undefined && !has) sql.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${definition}`);
  }
  const runs = tableSql("runs");
  if (runs !== undefined && !runs.includes(RUN_STATE_SQL_LIST)) {
    const columns = sql
      .exec("SELECT name FROM pragma_table_info('runs')")
      .toArray()
      .map((r) => r.name as string)
      .join(", ");
    sql.exec(runsTable("runs_upgraded"));
    sql.exec(`INSERT INTO runs_upgraded (${columns}) SELECT ${columns} FROM runs`);
    sql.exec("DROP TABLE runs"); // its indexes go with it; SCHEMA makes them again
    sql.exec("ALTER TABLE runs_upgraded RENAME TO runs");
  }
}

export interface ShardJob extends JobDefinition {
  nextFireAt: number | null;
  fires: number;
  rateNextAt: number | null;
}

/** A run about to be created. */
export type NewRun = Pick<RunRow, "id" | "jobId" | "jobVersion" | "trigger" | "scheduledAt" | "catchUp">;

type Row = Record<string, SqlStorageValue>;

/** Bound parameters per statement, below the Durable Object SQLite limit of 100. */
const MAX_PARAMS = 90;

const toJob = (r: Row): ShardJob => ({
  id: r.id as string,
  tenantId: r.tenant_id as string,
  version: r.version as number,
  spec: JSON.parse(r.spec as string) as JobSpec,
  paused: r.paused === 1,
  deleted: r.deleted === 1,
  createdAt: r.created_at as number,
  nextFireAt: r.next_fire_at as number | null,
  fires: r.fires as number,
  rateNextAt: r.rate_next_at as number | null,
});

const toRun = (r: Row): RunRow => ({
  id: r.id as string,
  jobId: r.job_id as string,
  jobVersion: r.job_version as number,
  trigger: r.trigger as RunRow["trigger"],
  scheduledAt: r.scheduled_at as number,
  catchUp: r.catch_up === 1,
  state: r.state as RunState,
  attempt: r.attempt as number,
  fence: r.fence as number,
  dueAt: r.due_at as number | null,
  createdAt: r.created_at as number,
  startedAt: r.started_at as number | null,
  finishedAt: r.finished_at as number | null,
  status: r.status as number | null,
  error: r.error as string | null,
  result: r.result as string | null,
  permit: (r.permit as string | null) ?? null,
});

const toAttempt = (r: Row): AttemptRow => ({
  attempt: r.attempt as number,
  fence: r.fence as number,
  startedAt: r.started_at as number,
  finishedAt: r.finished_at as number | null,
  outcome: r.outcome as AttemptRow["outcome"],
  status: r.status as number | null,
  error: r.error as string | null,
  completionToken: r.completion_token as string,
  late: r.late as string | null,
});

export class ShardStore {
  private readonly tenants = new Map<string, TenantSettings | null>();

  /** Call inside a transaction (see `upgrade`). */
  constructor(private readonly sql: SqlStorage) {
    upgrade(sql);
    sql.exec(SCHEMA);
  }

  // ---- meta ----

  getMeta(key: string): string | null {
    const rows = this.sql.exec("SELECT value FROM meta WHERE key = ?", key).toArray();
    return (rows[0]?.value as string | undefined) ?? null;
  }

  setMeta(key: string, value: string): void {
    this.sql.exec("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", key, value);
  }

  // ---- jobs ----

  getJob(id: string): ShardJob | null {
    const row = this.sql.exec("SELECT * FROM jobs WHERE id = ?", id).toArray()[0];
    return row ? toJob(row) : null;
  }

  getJobs(ids: string[]): ShardJob[] {
    return this.whereIdIn("SELECT * FROM jobs WHERE id IN", ids).map(toJob);
  }

  /**
   * Rows of `select (...ids)`, asked in chunks: a Durable Object's SQLite takes at most 100
   * bound parameters per statement (an admission pass asks for up to 2,000 runs' jobs).
   */
  private whereIdIn(select: string, ids: string[], suffix = ""): Row[] {
    const rows: Row[] = [];
    for (let i = 0; i < ids.length; i += MAX_PARAMS) {
      const chunk = ids.slice(i, i + MAX_PARAMS);
      rows.push(...this.sql.exec(`${select} (${chunk.map(() => "?").join(",")}) ${suffix}`, ...chunk).toArray());
    }
    return rows;
  }

  jobVersions(ids: string[]): Map<string, number> {
    return new Map(this.getJobs(ids).map((j) => [j.id, j.version]));
  }

  /** Inserts or replaces a job's definition; its fire count carries over. */
  putJob(job: JobDefinition, nextFireAt: number | null, nextDueAt: number | null): void {
    this.sql.exec(
      `INSERT INTO jobs (id, tenant_id, version, spec, paused, deleted, created_at, next_fire_at, next_due_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET version = excluded.version, spec = excluded.spec, paused = excluded.paused,
         deleted = excluded.deleted, next_fire_at = excluded.next_fire_at, next_due_at = excluded.next_due_at`,
      job.id,
      job.tenantId,
      job.version,
      JSON.stringify(job.spec),
      job.paused ? 1 : 0,
      job.deleted ? 1 : 0,
      job.createdAt,
      nextFireAt,
      nextDueAt,
    );
  }

  /** Jobs whose next fire is due, earliest first. Paused and deleted jobs never fire. */
  dueJobs(now: number, limit: number): ShardJob[] {
    return this.sql
      .exec("SELECT * FROM jobs WHERE next_due_at <= ? AND paused = 0 AND deleted = 0 ORDER BY next_due_at LIMIT ?", now, limit)
      .toArray()
      .map(toJob);
  }

  /** Moves a job to its next fire, counting the fires just made. */
  setNextFire(jobId: string, nextFireAt: number | null, nextDueAt: number | null, firesMade: number): void {
    this.sql.exec(
      "UPDATE jobs SET next_fire_at = ?, next_due_at = ?, fires = fires + ? WHERE id = ?",
      nextFireAt,
      nextDueAt,
      firesMade,
      jobId,
    );
  }

  // ---- runs ----

  getRun(id: string): RunRow | null {
    const row = this.sql.exec("SELECT * FROM runs WHERE id = ?", id).toArray()[0];
    return row ? toRun(row) : null;
  }

  /**
   * Inserts a run: `queued` with its outbox row (dispatched after commit), `waiting` (for flow
   * control to admit it), `buffered` (for the job's unfinished run), or `skipped` (final). False,
   * and nothing written, if the run exists: run ids are derived, so this is what makes a
   * repeated fire harmless.
   */
  createRun(
    run: NewRun,
    now: number,
    as: { state: "queued"; claimDeadline: number } | { state: "waiting" } | { state: "buffered" } | { state: "skipped"; reason: string },
  ): boolean {
    const dueAt = as.state === "queued" ? as.claimDeadline : as.state === "waiting" ? now : null;
    const inserted = this.sql.exec(
      `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, catch_up, state, attempt, fence, due_at, created_at, finished_at, error)
       VALUES (?, ?, ?, ?, ?, ?, ?, 1, 1, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
      run.id,
      run.jobId,
      run.jobVersion,
      run.trigger,
      run.scheduledAt,
      run.catchUp ? 1 : 0,
      as.state,
      dueAt,
      now,
      as.state === "skipped" ? now : null,
      as.state === "skipped" ? as.reason : null,
    ).rowsWritten;
    if (inserted === 0) return false;
    if (as.state === "queued") this.addOutbox(run.id, 1);
    return true;
  }

  /** A job's runs that have not ended: the ones an overlap policy looks at. */
  unfinishedRuns(jobId: string): RunRow[] {
    return this.sql
      .exec("SELECT * FROM runs WHERE job_id = ? AND state IN ('waiting', 'queued', 'running', 'retry_wait') ORDER BY scheduled_at", jobId)
      .toArray()
      .map(toRun);
  }

  bufferedRuns(jobId?: string): RunRow[] {
    const rows =
      jobId === undefined
        ? this.sql.exec("SELECT * FROM runs WHERE state = 'buffered'")
        : this.sql.exec("SELECT * FROM runs WHERE state = 'buffered' AND job_id = ?", jobId);
    return rows.toArray().map(toRun);
  }

  /** Runs whose due time has come (claim deadline, lease expiry or retry time). */
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
    return this.sql.exec("SELECT COUNT(*) AS n FROM runs WHERE job_id = ? AND state IN ('queued', 'running')", jobId).one().n as number;
  }

  /** When a waiting run is looked at again by the alarm (null: when one of its job's runs ends). */
  setDueAt(runId: string, dueAt: number | null): void {
    this.sql.exec("UPDATE runs SET due_at = ? WHERE id = ?", dueAt, runId);
  }

  setRateNext(jobId: string, at: number): void {
    this.sql.exec("UPDATE jobs SET rate_next_at = ? WHERE id = ?", at, jobId);
  }

  /** A permit to give back to its tenant's gate after commit. */
  releasePermitLater(permit: string, tenantId: string): void {
    this.sql.exec("INSERT INTO permit_releases (permit, tenant_id) VALUES (?, ?) ON CONFLICT DO NOTHING", permit, tenantId);
  }

  // ---- tenants ----

  putTenant(t: TenantSettings): void {
    this.tenants.delete(t.id); // read again after the write (or after its rollback)
    this.sql.exec(
      `INSERT INTO tenants (id, version, signing_generation, max_in_flight) VALUES (?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET version = excluded.version, signing_generation = excluded.signing_generation,
         max_in_flight = excluded.max_in_flight WHERE excluded.version > tenants.version`,
      t.id,
      t.version,
      t.signingGeneration,
      t.maxRunsInFlight,
    );
  }

  /** Asked once per run created and claimed; memoized, since only putTenant changes the table. */
  getTenant(id: string): TenantSettings | null {
    if (this.tenants.has(id)) return this.tenants.get(id)!;
    const row = this.sql.exec("SELECT * FROM tenants WHERE id = ?", id).toArray()[0];
    const tenant = row
      ? {
          id,
          version: row.version as number,
          signingGeneration: row.signing_generation as number,
          maxRunsInFlight: row.max_in_flight as number | null,
        }
      : null;
    this.tenants.set(id, tenant);
    return tenant;
  }

  /** Permits a changed run must give back, to send after commit. */
  permitReleases(limit: number): Array<{ permit: string; tenantId: string }> {
    return this.sql
      .exec("SELECT permit, tenant_id FROM permit_releases LIMIT ?", limit)
      .toArray()
      .map((r) => ({ permit: r.permit as string, tenantId: r.tenant_id as string }));
  }

  removePermitReleases(permits: string[]): void {
    for (const permit of permits) this.sql.exec("DELETE FROM permit_releases WHERE permit = ?", permit);
  }

  /** Runs of a job that have not started an attempt yet or wait for their next one. */
  pendingRuns(jobId: string): RunRow[] {
    return this.sql
      .exec("SELECT * FROM runs WHERE job_id = ? AND state IN ('waiting', 'queued', 'retry_wait', 'buffered')", jobId)
      .toArray()
      .map(toRun);
  }

  listRuns(jobId: string, limit: number, before?: { scheduledAt: number; id: string }): RunRow[] {
    const rows = before
      ? this.sql.exec(
          `SELECT * FROM runs WHERE job_id = ? AND (scheduled_at < ? OR (scheduled_at = ? AND id < ?))
           ORDER BY scheduled_at DESC, id DESC LIMIT ?`,
          jobId,
          before.scheduledAt,
          before.scheduledAt,
          before.id,
          limit,
        )
      : this.sql.exec("SELECT * FROM runs WHERE job_id = ? ORDER BY scheduled_at DESC, id DESC LIMIT ?", jobId, limit);
    return rows.toArray().map(toRun);
  }

  /**
   * Moves a run along `event`, refusing any transition the state table lacks. `changes` are
   * the other columns the step sets; the state column is only ever written here.
   */
  moveRun(
    run: RunRow,
    event: RunEvent,
    changes: Partial<
      Pick<RunRow, "jobVersion" | "attempt" | "fence" | "dueAt" | "startedAt" | "finishedAt" | "status" | "error" | "result" | "permit">
    >,
  ): RunRow {
    const to = transition(run.state, event);
    if (to === null) throw new Error(`run ${run.id}: no transition ${run.state} --${event}-->`);
    const next: RunRow = { ...run, ...changes, state: to };
    if (IN_FLIGHT_STATES.includes(run.state) && !IN_FLIGHT_STATES.includes(to)) {
      // It stops being in flight: its tenant permit goes back, in this same transaction, and
      // its job's waiting runs (held by maxConcurrency) are looked at again now.
      if (run.permit !== null) {
        this.sql.exec(
          "INSERT INTO permit_releases (permit, tenant_id) SELECT ?, tenant_id FROM jobs WHERE id = ? ON CONFLICT DO NOTHING",
          run.permit,
          run.jobId,
        );
        next.permit = null;
      }
      this.sql.exec("UPDATE runs SET due_at = ?1 WHERE job_id = ?2 AND state = 'waiting' AND due_at > ?1", Date.now(), run.jobId);
    }
    this.sql.exec(
      `UPDATE runs SET state = ?, job_version = ?, attempt = ?, fence = ?, due_at = ?, started_at = ?, finished_at = ?, status = ?,
         error = ?, result = ?, permit = ? WHERE id = ?`,
      next.state,
      next.jobVersion,
      next.attempt,
      next.fence,
      next.dueAt,
      next.startedAt,
      next.finishedAt,
      next.status,
      next.error,
      next.result,
      next.permit,
      run.id,
    );
    return next;
  }

  /** A running attempt's lease moves (the target accepted the work, or sent a heartbeat). */
  extendLease(runId: string, until: number): void {
    this.sql.exec("UPDATE runs SET due_at = ? WHERE id = ? AND state = 'running'", until, runId);
  }

  /** Dead letters (dead and failed runs), newest failure first, of one job, one tenant's, or all. */
  deadLetters(
    scope: { tenantId: string | null; jobId: string | null },
    limit: number,
    before?: { finishedAt: number; id: string },
  ): RunRow[] {
    const where = ["state IN ('dead', 'failed')"];
    const args: SqlStorageValue[] = [];
    if (scope.jobId !== null) where.push("job_id = ?"), args.push(scope.jobId);
    if (scope.tenantId !== null) where.push("job_id IN (SELECT id FROM jobs WHERE tenant_id = ?)"), args.push(scope.tenantId);
    if (before) where.push("(finished_at < ? OR (finished_at = ? AND id < ?))"), args.push(before.finishedAt, before.finishedAt, before.id);
    return this.sql
      .exec(`SELECT * FROM runs WHERE ${where.join(" AND ")} ORDER BY finished_at DESC, id DESC LIMIT ?`, ...args, limit)
      .toArray()
      .map(toRun);
  }

  // ---- attempts ----

  startAttempt(runId: string, attempt: number, fence: number, now: number, completionToken: string): void {
    this.sql.exec(
      "INSERT INTO attempts (run_id, attempt, fence, started_at, outcome, completion_token) VALUES (?, ?, ?, ?, 'running', ?)",
      runId,
      attempt,
      fence,
      now,
      completionToken,
    );
  }

  /** The target answered 202: the attempt goes on outside edgecron until it completes. */
  acceptAttempt(runId: string, fence: number, status: number): void {
    this.sql.exec(
      "UPDATE attempts SET outcome = 'accepted', status = ? WHERE run_id = ? AND fence = ? AND outcome = 'running'",
      status,
      runId,
      fence,
    );
  }

  finishAttempt(
    runId: string,
    fence: number,
    outcome: AttemptRow["outcome"],
    now: number,
    status: number | null,
    error: string | null,
  ): void {
    this.sql.exec(
      `UPDATE attempts SET outcome = ?, finished_at = ?, status = ?, error = ?
       WHERE run_id = ? AND fence = ? AND outcome IN ('running', 'accepted')`,
      outcome,
      now,
      status,
      error,
      runId,
      fence,
    );
  }

  /** Keeps a late outcome on the attempt it belongs to, so the run shows it happened. */
  noteLateOutcome(runId: string, fence: number, description: string): void {
    this.sql.exec("UPDATE attempts SET late = ? WHERE run_id = ? AND fence = ?", description, runId, fence);
  }

  getAttempt(runId: string, fence: number): AttemptRow | null {
    const row = this.sql.exec("SELECT * FROM attempts WHERE run_id = ? AND fence = ?", runId, fence).toArray()[0];
    return row ? toAttempt(row) : null;
  }

  attempts(runId: string): AttemptRow[] {
    return this.sql.exec("SELECT * FROM attempts WHERE run_id = ? ORDER BY fence", runId).toArray().map(toAttempt);
  }

  attemptCounts(runIds: string[]): Map<string, number> {
    const rows = this.whereIdIn("SELECT run_id, COUNT(*) AS n FROM attempts WHERE run_id IN", runIds, "GROUP BY run_id");
    return new Map(rows.map((r) => [r.run_id as string, r.n as number]));
  }

  // ---- outbox ----

  addOutbox(runId: string, fence: number): void {
    this.sql.exec("INSERT INTO outbox (run_id, fence) VALUES (?, ?) ON CONFLICT DO NOTHING", runId, fence);
  }

  outbox(limit: number): Dispatch[] {
    return this.sql
      .exec("SELECT run_id, fence FROM outbox LIMIT ?", limit)
      .toArray()
      .map((r) => ({ runId: r.run_id as string, fence: r.fence as number }));
  }

  removeOutbox(dispatches: Dispatch[]): void {
    for (const d of dispatches) this.sql.exec("DELETE FROM outbox WHERE run_id = ? AND fence = ?", d.runId, d.fence);
  }

  removeOutboxOfRun(runId: string): void {
    this.sql.exec("DELETE FROM outbox WHERE run_id = ?", runId);
  }

  // ---- metrics ----

  /** Run counts by state, dispatch backlog, and the shard-measured fire lag of recent runs. */
  metrics(since: number, now: number, maxLagSamples: number, tenantId: string | null): ShardMetrics {
    // ?1 is the tenant (null: all); a run belongs to it through its job.
    const ofTenant = (runIdColumn: string) =>
      `(?1 IS NULL OR ${runIdColumn} IN (SELECT r.id FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.tenant_id = ?1))`;
    const byState = Object.fromEntries(
      this.sql
        .exec(`SELECT state, COUNT(*) AS n FROM runs WHERE ${ofTenant("id")} GROUP BY state`, tenantId)
        .toArray()
        .map((r) => [r.state as string, r.n as number]),
    );
    const attempts = Object.fromEntries(
      this.sql
        .exec(
          `SELECT outcome, COUNT(*) AS n FROM attempts WHERE finished_at >= ?2 AND ${ofTenant("run_id")} GROUP BY outcome`,
          tenantId,
          since,
        )
        .toArray()
        .map((r) => [r.outcome as string, r.n as number]),
    );
    // Lag: first claim minus scheduled instant, both read on the shard's clock.
    const lagsMs = this.sql
      .exec(
        `SELECT started_at - scheduled_at AS lag FROM runs WHERE trigger = 'schedule' AND started_at >= ?2 AND ${ofTenant("id")}
         ORDER BY started_at DESC LIMIT ?3`,
        tenantId,
        since,
        maxLagSamples,
      )
      .toArray()
      .map((r) => r.lag as number);
    const oldest = this.sql.exec(`SELECT MIN(created_at) AS t FROM runs WHERE state = 'queued' AND ${ofTenant("id")}`, tenantId).one().t as
      | number
      | null;
    const outbox = this.sql.exec(`SELECT COUNT(*) AS n FROM outbox WHERE ${ofTenant("run_id")}`, tenantId).one().n as number;
    return {
      runsByState: byState,
      attemptsByOutcome: attempts,
      lagsMs,
      outbox,
      awaitingClaim: byState.queued ?? 0,
      oldestAwaitingClaimMs: oldest === null ? null : now - oldest,
    };
  }

  // ---- the alarm ----

  /** The earliest instant the shard must act: a fire, a run's due time, or now for unsent dispatches. */
  earliestWork(now: number): number | null {
    if (this.sql.exec("SELECT 1 FROM outbox UNION ALL SELECT 1 FROM permit_releases LIMIT 1").toArray().length > 0) return now;
    const row = this.sql
      .exec(
        `SELECT MIN(t) AS t FROM (
           SELECT MIN(next_due_at) AS t FROM jobs WHERE paused = 0 AND deleted = 0
           UNION ALL SELECT MIN(due_at) FROM runs)`,
      )
      .one();
    return (row.t as number | null) ?? null;
  }
}
