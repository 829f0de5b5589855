import type { JobDefinition, RunRow, TenantSettings } from "../protocol/stored-rows";
import { rowsForList } from "../sql";
import { AdmissionStore } from "./admission-store";
import { AttemptStore } from "./attempt-store";
import { FireStore } from "./fire-store";
import { FiredThrough } from "./fired-through";
import { FrequentJobs } from "./frequent-jobs";
import { Leases } from "./leases";
import { PermitReleases } from "./permit-releases";
import { type ShardJob, toJob, toRun, toTenant, watchesOutcomes } from "./rows";
import { type AttemptChange, writeRunStep } from "./run-writes";

/**
 * The shard's SQLite storage. Here: the reads every operation shares (a job, a run, a tenant),
 * what applying jobs and tenants writes, failure streaks, and runs' due times (retries,
 * admissions' re-checks, breakers' waits). The SQL of each operation is grouped by operation in
 * the members below (docs/architecture.md, "Which SQL runs when"): a fire's in `fires`,
 * admission's in `admission`, an attempt's outcome in `attempts`, leases in `leases`, permit
 * releases in `permitReleases`; a run's step, which every transition takes, is `writeRun`
 * (run-writes.ts). Every method is synchronous (SQLite in a Durable Object is), so a caller that
 * wraps several of them in `transactionSync` gets one atomic change with no interleaving.
 */
export class ShardStore {
  private readonly tenants = new Map<string, TenantSettings | null>();
  /** Tenant permits runs gave back, to send to their gates after commit. */
  readonly permitReleases: PermitReleases;
  /** Jobs that fire at least once per claim timeout: their due times in memory. */
  readonly frequent: FrequentJobs;
  /** When leased attempts' leases end (leases.ts). */
  readonly leases: Leases;
  /** An attempt's outcome: a report's read, a 202, a heartbeat, a late answer. */
  readonly attempts: AttemptStore;
  /** A fire's SQL: the runs it makes, the job's next fire, the open runs its policies look at. */
  readonly fires: FireStore;
  /** Admission's SQL: waiting runs, in-flight counts, wake-ups. */
  readonly admission: AdmissionStore;
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
    this.fires = new FireStore(sql, this.firedThrough, this.frequent, this.leases);
    this.admission = new AdmissionStore(sql);
  }

  /** A change rolled back: what the store keeps in memory of jobs is read from storage again. */
  forgetKept(): void {
    this.leases.forget();
    this.frequent.forget();
    this.firedThrough.forget();
    this.admission.forget();
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
      `INSERT INTO jobs (id, tenant_id, version, spec, paused, deleted, created_at, next_fire_at, next_due_at, watches_outcomes, fires, standalone)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
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
      job.standalone ? 1 : 0,
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

  /** Runs whose due time has come (a retry, an admission's re-check, a breaker's wait). */
  dueRuns(now: number, limit: number): RunRow[] {
    return this.sql.exec("SELECT * FROM runs WHERE due_at <= ? ORDER BY due_at LIMIT ?", now, limit).toArray().map(toRun);
  }

  /** When a waiting run is looked at again by the alarm (null: when one of its job's runs ends). */
  setDueAt(runId: string, dueAt: number | null): void {
    this.sql.exec("UPDATE runs SET due_at = ? WHERE id = ?", dueAt, runId);
  }

  /** Writes a run's step as RunMoves (run-moves.ts) decided it (run-writes.ts). */
  writeRun(run: RunRow, next: RunRow, attempt?: AttemptChange): void {
    writeRunStep(this.sql, run, next, attempt);
  }

  // ---- tenants ----

  putTenant(t: TenantSettings): void {
    const before = this.getTenant(t.id);
    this.tenants.delete(t.id); // read again after the write (or after its rollback)
    this.limited = undefined;
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

  /** Whether any tenant here has a runs-in-flight limit; memoized like `getTenant`. */
  anyLimitedTenant(): boolean {
    this.limited ??= this.sql.exec("SELECT 1 FROM tenants WHERE max_in_flight IS NOT NULL LIMIT 1").toArray().length > 0;
    return this.limited;
  }

  private limited: boolean | undefined;

  /** Asked once per run created and claimed; memoized, since only putTenant changes the table. */
  getTenant(id: string): TenantSettings | null {
    if (this.tenants.has(id)) return this.tenants.get(id)!;
    const row = this.sql.exec("SELECT * FROM tenants WHERE id = ?", id).toArray()[0];
    const tenant = row ? toTenant(row) : null;
    this.tenants.set(id, tenant);
    return tenant;
  }

  // ---- what the alarm waits for ----

  /** The earliest due time of any run (a retry, an admission, a breaker's wait) or lease. */
  earliestRunDue(): number | null {
    const run = this.sql.exec("SELECT MIN(due_at) AS t FROM runs WHERE due_at IS NOT NULL").one().t as number | null;
    const chunk = this.leases.earliest();
    return run === null || chunk === null ? (run ?? chunk) : Math.min(run, chunk);
  }
}
