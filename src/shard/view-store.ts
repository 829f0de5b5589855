import { runKeyRange } from "../model/ids";
import { DEAD_LETTER_STATES, FINAL_STATES, sqlList } from "../model/run-states";
import type { ShardMetrics } from "../protocol/shard-rpc";
import type { AttemptRow, JobDefinition, RunRow } from "../protocol/stored-rows";
import { rowsForList } from "../sql";
import { toAttempt, toJob, toRun } from "./rows";

const DEAD_LETTERS = sqlList(DEAD_LETTER_STATES);

/** A page of a tenant's live standalone jobs, newest first: a range of `jobs_standalone` (the plan is tested). */
export const STANDALONE_OF_TENANT_SQL =
  "SELECT * FROM jobs WHERE standalone = 1 AND deleted = 0 AND tenant_id = ? AND id < ? ORDER BY id DESC LIMIT ?";

/**
 * How many of a tenant's standalone jobs (QStash messages) made before an id (`jobIdsFrom`) are
 * live: not cancelled, and not ended (delivered, dead, cancelled): a message has one run, in its
 * job's key range (`runKeyRange`), and none before it fires. A range of `jobs_standalone`, then
 * a seek per job.
 */
export const LIVE_MESSAGES_OF_TENANT_SQL = `SELECT COUNT(*) AS n FROM jobs AS j WHERE j.standalone = 1 AND j.deleted = 0 AND j.tenant_id = ? AND j.id < ?
  AND NOT EXISTS (SELECT 1 FROM runs AS r WHERE r.id > 'run_' || substr(j.id, 5) || '_' AND r.id < 'run_' || substr(j.id, 5) || '\`'
    AND r.state IN (${sqlList(FINAL_STATES)}))`;

/**
 * The statements of views (`views.ts`): pages of a job's runs, dead letters, attempt logs,
 * metrics, the job versions the sweep compares. Apart from `store.ts`, whose statements serve the runs in hand, because these only
 * read, for the API, never on the way from a fire to its outcome.
 */
export class ViewStore {
  /** Over the same storage as the shard's store (its meter's, so these rows are counted too). */
  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** Of these ids, the jobs this shard holds alone (QStash messages, step 22), deleted ones included. */
  standaloneJobs(ids: string[]): JobDefinition[] {
    return rowsForList(this.sql, ids, (list) => `SELECT * FROM jobs WHERE id IN (${list}) AND standalone = 1`).map(toDefinition);
  }

  /** The tenant's live messages here made before `madeBefore` (a job id, or a prefix of one), for its gate's count (src/gate/message-quota.ts). */
  countLiveMessages(tenantId: string, madeBefore: string): number {
    return this.sql.exec(LIVE_MESSAGES_OF_TENANT_SQL, tenantId, madeBefore).one().n as number;
  }

  /**
   * A tenant's live standalone jobs, newest first (ids sort by creation), from `jobs_standalone`.
   * Of every tenant (null, the admin's view): the jobs' key read backwards, which no index spares.
   */
  listStandaloneJobs(tenantId: string | null, limit: number, beforeId: string | null): JobDefinition[] {
    const before = beforeId ?? "~"; // after every job id
    const rows =
      tenantId === null
        ? this.sql.exec("SELECT * FROM jobs WHERE standalone = 1 AND deleted = 0 AND id < ? ORDER BY id DESC LIMIT ?", before, limit)
        : this.sql.exec(STANDALONE_OF_TENANT_SQL, tenantId, before, limit);
    return rows.toArray().map(toDefinition);
  }

  /** The versions the shard holds of these jobs (the sweep's comparison): their rows' alone. */
  jobVersions(ids: string[]): Map<string, number> {
    const rows = rowsForList(this.sql, ids, (list) => `SELECT id, version FROM jobs WHERE id IN (${list})`);
    return new Map(rows.map((r) => [r.id as string, r.version as number]));
  }

  /**
   * A job's runs, newest fire first, a page at a time. They are one range of the runs' primary
   * key (`runKeyRange`): what a job keeps (retention's cap, DEFAULT_RETENTION_RUNS) is read and
   * sorted, which spares every run an index entry written (docs/cost.md).
   */
  listRuns(jobId: string, limit: number, before?: { scheduledAt: number; id: string }): RunRow[] {
    const [from, to] = runKeyRange(jobId);
    const rows = before
      ? this.sql.exec(
          `SELECT * FROM runs WHERE id > ? AND id < ? AND job_id = ? AND parent_run_id IS NULL
           AND (scheduled_at < ? OR (scheduled_at = ? AND id < ?)) ORDER BY scheduled_at DESC, id DESC LIMIT ?`,
          from,
          to,
          jobId,
          before.scheduledAt,
          before.scheduledAt,
          before.id,
          limit,
        )
      : this.sql.exec(
          "SELECT * FROM runs WHERE id > ? AND id < ? AND job_id = ? AND parent_run_id IS NULL ORDER BY scheduled_at DESC, id DESC LIMIT ?",
          from,
          to,
          jobId,
          limit,
        );
    return rows.toArray().map(toRun);
  }

  /** Dead letters (dead and failed runs), newest failure first, of one job, one tenant's, or all. */
  deadLetters(
    scope: { tenantId: string | null; jobId: string | null },
    limit: number,
    before?: { finishedAt: number; id: string },
  ): RunRow[] {
    // Only the filters asked are written, so that SQLite can pick the index that fits them.
    // A workflow's failed step is not a dead letter of its own: its run is (and a retry takes the run).
    const where = [`state IN (${DEAD_LETTERS})`, "parent_run_id IS NULL"];
    const args: SqlStorageValue[] = [];
    const filter = (condition: string, ...values: SqlStorageValue[]) => {
      where.push(condition);
      args.push(...values);
    };
    if (scope.jobId !== null) filter("job_id = ?", scope.jobId);
    if (scope.tenantId !== null) filter("job_id IN (SELECT id FROM jobs WHERE tenant_id = ?)", scope.tenantId);
    if (before) filter("(finished_at < ? OR (finished_at = ? AND id < ?))", before.finishedAt, before.finishedAt, before.id);
    return this.sql
      .exec(`SELECT * FROM runs WHERE ${where.join(" AND ")} ORDER BY finished_at DESC, id DESC LIMIT ?`, ...args, limit)
      .toArray()
      .map(toRun);
  }

  // ---- attempts: the latest on its run's row, earlier ones in `attempts`, both in `attempt_log` ----

  attempts(runId: string): AttemptRow[] {
    return this.sql.exec("SELECT * FROM attempt_log WHERE run_id = ? ORDER BY fence", runId).toArray().map(toAttempt);
  }

  attemptCounts(runIds: string[]): Map<string, number> {
    const rows = rowsForList(
      this.sql,
      runIds,
      (list) => `SELECT run_id, COUNT(*) AS n FROM attempt_log WHERE run_id IN (${list}) GROUP BY run_id`,
    );
    return new Map(rows.map((r) => [r.run_id as string, r.n as number]));
  }

  /** Run counts by state, dispatch backlog, and the shard-measured fire lag of recent runs. */
  metrics(
    since: number,
    now: number,
    maxLagSamples: number,
    tenantId: string | null,
  ): Omit<ShardMetrics, "cost" | "outbox" | "durableObject" | "archive" | "totals"> {
    // ?1 is the tenant (null: all); a run belongs to it through its job.
    const ofTenant = (runIdColumn: string) =>
      `(?1 IS NULL OR ${runIdColumn} IN (SELECT r.id FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.tenant_id = ?1))`;
    const byState = Object.fromEntries(
      this.sql
        .exec(`SELECT state, COUNT(*) AS n FROM runs WHERE parent_run_id IS NULL AND ${ofTenant("id")} GROUP BY state`, tenantId)
        .toArray()
        .map((r) => [r.state as string, r.n as number]),
    );
    const attempts = Object.fromEntries(
      this.sql
        .exec(
          `SELECT outcome, COUNT(*) AS n FROM attempt_log WHERE finished_at >= ?2 AND ${ofTenant("run_id")} GROUP BY outcome`,
          tenantId,
          since,
        )
        .toArray()
        .map((r) => [r.outcome as string, r.n as number]),
    );
    // Lag: first dispatch (the attempt's start) minus scheduled instant, both read on the shard's clock.
    const lagsMs = this.sql
      .exec(
        `SELECT started_at - scheduled_at AS lag FROM runs WHERE trigger = 'schedule' AND started_at >= ?2 AND parent_run_id IS NULL AND ${ofTenant("id")}
         ORDER BY started_at DESC LIMIT ?3`,
        tenantId,
        since,
        maxLagSamples,
      )
      .toArray()
      .map((r) => r.lag as number);
    // Dispatched, no outcome yet: the attempt's dispatch is in the queue or its target is being called.
    const unreported = this.sql
      .exec(
        `SELECT COUNT(*) AS n, MIN(a_started_at) AS t FROM runs WHERE state = 'running' AND a_outcome = 'running' AND ${ofTenant("id")}`,
        tenantId,
      )
      .one();
    const oldest = unreported.t as number | null;
    return {
      runsByState: byState,
      attemptsByOutcome: attempts,
      lagsMs,
      awaitingClaim: unreported.n as number,
      oldestAwaitingClaimMs: oldest === null ? null : now - oldest,
    };
  }
}

/** A job's row as its definition: what the API is handed of a standalone job. */
function toDefinition(row: Record<string, SqlStorageValue>): JobDefinition {
  const { id, tenantId, version, spec, paused, deleted, createdAt, standalone } = toJob(row);
  return { id, tenantId, version, spec, paused, deleted, createdAt, ...(standalone && { standalone }) };
}
