import type { JobSpec } from "../model/job";
import type { JobDefinition } from "../protocol/stored-rows";
import { chunksForStatement, placeholders } from "../sql";
import { guard } from "./d1";

/**
 * The catalog in D1: job definitions as accepted. Nothing here is on the fire → record path.
 * Every change of a job bumps its version and sets updated_at: that is how the sweep's change
 * feed finds it (jobs_changed, `changedSince`), so a change that did not would reach its shard
 * only through the consistency pass.
 */

export interface CatalogJob {
  id: string;
  tenantId: string;
  name: string | null;
  shard: string;
  version: number;
  spec: JobSpec;
  paused: boolean;
  /** Set when edgecron paused the job itself (auto-pause); null otherwise. */
  pausedReason: string | null;
  createdAt: number;
  updatedAt: number;
  deletedAt: number | null;
  /** Held by its shard alone, with no catalog row: a QStash message (src/app/standalone-jobs.ts). */
  standalone?: true;
}

type Row = Record<string, unknown>;

const toJob = (r: Row): CatalogJob => ({
  id: r.id as string,
  tenantId: r.tenant_id as string,
  name: (r.name as string | null) ?? null,
  shard: r.shard as string,
  version: r.version as number,
  spec: JSON.parse(r.spec as string) as JobSpec,
  paused: r.paused === 1,
  pausedReason: (r.paused_reason as string | null) ?? null,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
  deletedAt: (r.deleted_at as number | null) ?? null,
});

/** The shard's view of a catalog row. */
export function toDefinition(job: CatalogJob): JobDefinition {
  return {
    id: job.id,
    tenantId: job.tenantId,
    version: job.version,
    spec: job.spec,
    paused: job.paused,
    deleted: job.deletedAt !== null,
    createdAt: job.createdAt,
    ...(job.standalone && { standalone: true }),
  };
}

/**
 * Inserts a job as it is, under no quota: a catalog row written where the API would not write
 * one (the tests' lost jobs and orphans). The API creates jobs through insert-jobs.ts.
 */
export async function insertJob(db: D1Database, job: CatalogJob): Promise<void> {
  const values = [
    job.id,
    job.tenantId,
    job.name,
    job.shard,
    job.version,
    JSON.stringify(job.spec),
    job.paused ? 1 : 0,
    job.createdAt,
    job.updatedAt,
  ];
  const insert =
    "INSERT INTO jobs (id, tenant_id, name, shard, version, spec, paused, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";
  await guard("insert", () =>
    db
      .prepare(insert)
      .bind(...values)
      .run(),
  );
}

/** A job by id; deleted jobs only when asked (their runs stay readable). */
export async function getJob(db: D1Database, id: string, opts: { includeDeleted?: boolean } = {}): Promise<CatalogJob | null> {
  const row = await guard("read", () => db.prepare("SELECT * FROM jobs WHERE id = ?").bind(id).first<Row>());
  if (!row) return null;
  const job = toJob(row);
  return job.deletedAt !== null && !opts.includeDeleted ? null : job;
}

/**
 * Newest first; the cursor is the last id of the previous page. `tenantId` null: every tenant's.
 * `namePrefix`: only jobs whose name starts with it (a key limited to a prefix of job names).
 */
export async function listJobs(
  db: D1Database,
  tenantId: string | null,
  limit: number,
  before?: string,
  namePrefix: string | null = null,
): Promise<CatalogJob[]> {
  const stmt = db
    .prepare(
      `SELECT * FROM jobs WHERE deleted_at IS NULL AND (?1 IS NULL OR tenant_id = ?1) AND (?2 IS NULL OR id < ?2)
         AND (?4 IS NULL OR substr(name, 1, length(?4)) = ?4)
       ORDER BY id DESC LIMIT ?3`,
    )
    .bind(tenantId, before ?? null, limit, namePrefix);
  const { results } = await guard("list", () => stmt.all<Row>());
  return results.map(toJob);
}

/**
 * Changes a live job and bumps its version in one statement, so concurrent changes each get
 * their own version and a shard applies them in order. With `expectedVersion`, a compare-and-
 * set: only a job still at that version changes, so a change computed from what was read (a
 * whole spec) cannot overwrite one made meanwhile. With `revival` (a change that makes a
 * finished job live again: src/model/live-jobs.ts), only on room leased from its tenant's gate
 * at the tenant's current lease epoch when it has a quota, as a creation (insert-jobs.ts). Null
 * if the job is unknown, deleted, (with `expectedVersion`) at another version, or (with
 * `revival`) its lease is of no use.
 */
export async function updateJob(
  db: D1Database,
  id: string,
  change: { paused?: boolean; deleted?: boolean; name?: string | null; spec?: JobSpec },
  now: number,
  expectedVersion?: number,
  /** Joins the update's batch: the audit entry, written only if the job changed. */
  also: D1PreparedStatement[] = [],
  revival: { epoch: number | null } | null = null,
): Promise<CatalogJob | null> {
  // A pause or resume by a person clears the reason edgecron gave for a pause of its own.
  const update = db
    .prepare(
      `UPDATE jobs SET version = version + 1, updated_at = ?1,
         paused = COALESCE(?2, paused), paused_reason = CASE WHEN ?2 IS NULL THEN paused_reason END,
         deleted_at = CASE WHEN ?3 THEN ?1 ELSE deleted_at END,
         name = CASE WHEN ?4 THEN ?5 ELSE name END, spec = COALESCE(?6, spec)
       WHERE id = ?7 AND deleted_at IS NULL AND (?8 IS NULL OR version = ?8)
         AND (?9 = 0 OR (SELECT max_jobs FROM tenants WHERE id = jobs.tenant_id) IS NULL
           OR ?10 = (SELECT jobs_epoch FROM tenants WHERE id = jobs.tenant_id)) RETURNING *`,
    )
    .bind(
      now,
      change.paused === undefined ? null : change.paused ? 1 : 0,
      change.deleted ? 1 : 0,
      change.name !== undefined ? 1 : 0,
      change.name ?? null,
      change.spec ? JSON.stringify(change.spec) : null,
      id,
      expectedVersion ?? null,
      revival ? 1 : 0,
      revival?.epoch ?? null,
    );
  const [result] = await guard("update", () => db.batch<Row>([update, ...also]));
  const row = result!.results[0];
  return row ? toJob(row) : null;
}

/**
 * Edgecron pauses a live, running job itself (pauseAfterFailures), saying why; null when the job
 * is gone or already paused, e.g. by a person meanwhile, whose pause then stands as it is.
 */
export async function autoPauseJob(db: D1Database, id: string, reason: string, now: number): Promise<CatalogJob | null> {
  const row = await guard("autoPause", () =>
    db
      .prepare(
        `UPDATE jobs SET version = version + 1, updated_at = ?1, paused = 1, paused_reason = ?2
         WHERE id = ?3 AND deleted_at IS NULL AND paused = 0 RETURNING *`,
      )
      .bind(now, reason, id)
      .first<Row>(),
  );
  return row ? toJob(row) : null;
}

/** A catalog row as the sweep compares it with its shard. */
export interface ShardEntry {
  id: string;
  shard: string;
  version: number;
  deleted: boolean;
}

/**
 * The jobs after `afterId` in id order, deleted ones included: the consistency pass walks the
 * whole catalog this way, and the change feed finds new jobs this way (an id starts with its
 * job's creation instant, `firstIdAt`). A range of the primary key: a test checks the plan.
 */
export const JOBS_AFTER_SQL = "SELECT id, shard, version, deleted_at FROM jobs WHERE id > ?1 ORDER BY id LIMIT ?2";

export async function jobsAfter(db: D1Database, afterId: string, limit: number): Promise<ShardEntry[]> {
  const { results } = await guard("entries", () => db.prepare(JOBS_AFTER_SQL).bind(afterId, limit).all<Row>());
  return results.map((r) => ({
    id: r.id as string,
    shard: r.shard as string,
    version: r.version as number,
    deleted: r.deleted_at !== null,
  }));
}

/**
 * The first id a job created at `ms` (or later) can have: every job created earlier sorts
 * before it. Job ids are job_, the creation instant in base 36 over 9 digits, then random
 * characters (newJobId in src/model/ids.ts).
 */
export function firstIdAt(ms: number): string {
  return `job_${Math.max(0, ms).toString(36).padStart(9, "0")}`;
}

/** The creation instant a job id (or a cursor among job ids) starts with; 0 for the empty cursor. */
export function instantOfId(id: string): number {
  return Number.parseInt(id.slice("job_".length, "job_".length + 9), 36) || 0;
}

/** A changed catalog row as the change feed sees it. */
export interface ChangedEntry extends ShardEntry {
  updatedAt: number;
}

/**
 * Jobs changed after (updated_at, id) = (?1, ?2), in that order. Only changed jobs are in the
 * partial index jobs_changed (version > 1: a creation is version 1), and the row-value
 * comparison lets SQLite seek it; the `version > 1` term is what allows the partial index at
 * all, so it is written out as the index's own (a test checks the plan).
 */
export const CHANGED_SINCE_SQL =
  "SELECT id, shard, version, deleted_at, updated_at FROM jobs WHERE version > 1 AND (updated_at, id) > (?1, ?2) ORDER BY updated_at, id LIMIT ?3";

export async function changedSince(db: D1Database, after: { at: number; id: string }, limit: number): Promise<ChangedEntry[]> {
  const { results } = await guard("changes", () => db.prepare(CHANGED_SINCE_SQL).bind(after.at, after.id, limit).all<Row>());
  return results.map((r) => ({
    id: r.id as string,
    shard: r.shard as string,
    version: r.version as number,
    deleted: r.deleted_at !== null,
    updatedAt: r.updated_at as number,
  }));
}

/**
 * Removes the tombstones of deleted jobs (at most a statement's worth of ids). Only deleted rows
 * go, whatever the caller passes: a live job is never removed here.
 */
export async function purgeTombstones(db: D1Database, ids: string[]): Promise<number> {
  if (ids.length === 0) return 0;
  const result = await guard("purge tombstones", () =>
    db
      .prepare(`DELETE FROM jobs WHERE id IN (${placeholders(ids.length)}) AND deleted_at IS NOT NULL`)
      .bind(...ids)
      .run(),
  );
  return result.meta.changes;
}

export async function getJobsByIds(db: D1Database, ids: string[]): Promise<CatalogJob[]> {
  const pages = await Promise.all(
    chunksForStatement(ids).map((chunk) =>
      guard("read", () =>
        db
          .prepare(`SELECT * FROM jobs WHERE id IN (${placeholders(chunk.length)})`)
          .bind(...chunk)
          .all<Row>(),
      ),
    ),
  );
  return pages.flatMap((page) => page.results.map(toJob));
}

/**
 * Jobs, deleted ones included, whose target was stored before targets were sealed. A workflow
 * job has no target (its steps were sealed from the start: workflows came after sealing).
 */
export async function jobsWithUnsealedTargets(db: D1Database, limit: number): Promise<CatalogJob[]> {
  const { results } = await guard("unsealed", () =>
    db
      .prepare("SELECT * FROM jobs WHERE json_type(spec, '$.target') IS NOT NULL AND json_type(spec, '$.target.secrets') IS NULL LIMIT ?")
      .bind(limit)
      .all<Row>(),
  );
  return results.map(toJob);
}

/**
 * A job's targets (its own, or its steps'), notification receiver and QStash callbacks (a
 * schedule's) sealed under another key than `kid` or with their URL still in clear (stored
 * before URLs, or callbacks, were sealed): SQL over the spec, `?1` the key id. Mirrors
 * `needsResealing` (src/security/targets.ts), `notifyNeedsResealing`
 * (src/security/notify-urls.ts) and `callbackNeedsResealing` (src/qstash/sealed-callbacks.ts).
 */
const SEALED_UNDER_ANOTHER_KEY = `json_extract(spec, '$.target.secrets.kid') != ?1
  OR json_type(spec, '$.target.url') IS NOT NULL
  OR json_extract(spec, '$.notify.secrets.kid') != ?1
  OR json_type(spec, '$.notify.url') IS NOT NULL
  OR json_extract(spec, '$.target.qstash.callback.secrets.kid') != ?1
  OR json_type(spec, '$.target.qstash.callback.url') IS NOT NULL
  OR json_extract(spec, '$.target.qstash.failureCallback.secrets.kid') != ?1
  OR json_type(spec, '$.target.qstash.failureCallback.url') IS NOT NULL
  OR EXISTS (SELECT 1 FROM json_each(spec, '$.steps') s
    WHERE json_extract(s.value, '$.target.secrets.kid') != ?1 OR json_type(s.value, '$.target.url') IS NOT NULL)`;

/**
 * Jobs, deleted ones included, with a target sealed under another key than `kid` (the ring's
 * current one), or with its URL in clear: what the re-seal after a key rotation (or after the
 * release that sealed URLs) has left. Reads the whole table, which only a sweep during a
 * rotation does (src/reconcile/resealing.ts).
 */
export async function jobsSealedUnderAnotherKey(db: D1Database, kid: string, limit: number, after = ""): Promise<CatalogJob[]> {
  const { results } = await guard("sealed under another key", () =>
    db
      .prepare(`SELECT * FROM jobs WHERE id > ?2 AND (${SEALED_UNDER_ANOTHER_KEY}) ORDER BY id LIMIT ?3`)
      .bind(kid, after, limit)
      .all<Row>(),
  );
  return results.map(toJob);
}

/** How many jobs hold a target sealed under another key than `kid`, or its URL in clear: the re-seal's progress. */
export async function countSealedUnderAnotherKey(db: D1Database, kid: string): Promise<number> {
  const row = await guard("count sealed under another key", () =>
    db.prepare(`SELECT COUNT(*) AS n FROM jobs WHERE ${SEALED_UNDER_ANOTHER_KEY}`).bind(kid).first<{ n: number }>(),
  );
  return row?.n ?? 0;
}

/**
 * Replaces a job's spec as of the version it was read at (a change made meanwhile wins, and
 * this one is skipped), bumping the version so that shards take the new spec too.
 */
export async function replaceSpec(db: D1Database, job: CatalogJob, spec: JobSpec, now: number): Promise<boolean> {
  const result = await guard("replace spec", () =>
    db
      .prepare("UPDATE jobs SET spec = ?, version = version + 1, updated_at = ? WHERE id = ? AND version = ?")
      .bind(JSON.stringify(spec), now, job.id, job.version)
      .run(),
  );
  return result.meta.changes > 0;
}
