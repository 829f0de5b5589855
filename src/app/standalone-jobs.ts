import { ApiError, notFound } from "../api/errors";
import { type CatalogJob, toDefinition } from "../catalog/jobs";
import { holdsJobsOf, shardsInUse } from "../catalog/shards";
import { shardNamedBy } from "../model/ids";
import type { JobDefinition } from "../protocol/stored-rows";
import { shardStub } from "../stubs";
import { type Caller, mayTouchJob, scopeOf } from "./caller";
import { loadJob } from "./jobs";

/**
 * Jobs that their shards alone hold (`standalone`: QStash messages, docs/qstash.md), found
 * without the catalog: a standalone job's id names its shard (`shardNamedBy`). Each is shown in
 * the catalog's shape, so the /v2 views and the run routes read both kinds alike.
 */

/** A standalone job in the catalog's shape: its name is its label, as a message's job was named. */
export function asCatalogJob(def: JobDefinition, shard: string): CatalogJob {
  return {
    id: def.id,
    tenantId: def.tenantId,
    name: def.spec.target?.qstash?.label ?? null,
    shard,
    version: def.version,
    spec: def.spec,
    paused: def.paused,
    pausedReason: null,
    createdAt: def.createdAt,
    updatedAt: def.createdAt,
    // A shard keeps no time of deletion: the creation stands in, where only whether it was counts.
    deletedAt: def.deleted ? def.createdAt : null,
    standalone: true,
  };
}

async function askShard(env: Env, shard: string, ids: string[]): Promise<CatalogJob[]> {
  return (await shardStub(env, shard).standaloneJobs(ids)).map((def) => asCatalogJob(def, shard));
}

/**
 * A standalone job the caller may see, deleted ones included, or null. Its shard is asked only if
 * it holds the caller's jobs: an id is the caller's to make up, and a shard that never ran would
 * be started by the question.
 */
export async function findStandaloneJob(env: Env, caller: Caller, jobId: string): Promise<CatalogJob | null> {
  const shard = shardNamedBy(jobId);
  if (shard === null || !(await holdsJobsOf(env.DB, shard, scopeOf(caller)))) return null;
  const [job] = await askShard(env, shard, [jobId]);
  return job && mayTouchJob(caller, job) ? job : null;
}

/** A job of the catalog or, failing that, one its shard alone holds; deleted ones as `opts` says. 404 if neither. */
export async function loadAnyJob(env: Env, caller: Caller, jobId: string, opts: { includeDeleted?: boolean } = {}): Promise<CatalogJob> {
  try {
    return await loadJob(env, caller, jobId, opts);
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 404) throw err;
    const job = await findStandaloneJob(env, caller, jobId);
    if (!job || (job.deletedAt !== null && !opts.includeDeleted)) throw notFound("job", jobId);
    return job;
  }
}

/**
 * Of `ids`, the standalone jobs their shards hold, deleted ones included, asking only the shards
 * of the caller's jobs (as findStandaloneJob does); not checked against the caller otherwise.
 */
export async function standaloneJobsByIds(env: Env, caller: Caller, ids: string[]): Promise<CatalogJob[]> {
  if (ids.length === 0) return [];
  const inUse = new Set(await shardsInUse(env.DB, scopeOf(caller)));
  const byShard = Map.groupBy(
    ids.filter((id) => inUse.has(shardNamedBy(id) ?? "")),
    (id) => shardNamedBy(id)!,
  );
  return (await Promise.all([...byShard].map(([shard, list]) => askShard(env, shard, list)))).flat();
}

/**
 * Up to `limit` of the caller's live standalone jobs, newest first, created before the job
 * `beforeId`: each of the tenant's shards answers its newest, and the newest of those are the
 * page. One call per shard in use.
 */
export async function listStandaloneJobs(env: Env, caller: Caller, limit: number, beforeId?: string): Promise<CatalogJob[]> {
  const scope = scopeOf(caller);
  const shards = await shardsInUse(env.DB, scope);
  const pages = await Promise.all(
    shards.map(async (shard) =>
      (await shardStub(env, shard).listStandaloneJobs(scope, limit, beforeId)).map((def) => asCatalogJob(def, shard)),
    ),
  );
  return newestJobs(
    pages.flat().filter((job) => mayTouchJob(caller, job)),
    limit,
  );
}

/** The newest `limit` of jobs from several lists (job ids sort by creation): a page merged from shards and the catalog. */
export function newestJobs(jobs: CatalogJob[], limit: number): CatalogJob[] {
  return jobs.sort((a, b) => (a.id < b.id ? 1 : -1)).slice(0, limit);
}

/**
 * Deletes standalone jobs: each shard takes its jobs as deleted, at their next version, in one
 * call (their pending runs are cancelled, as for any deleted job). Those already deleted are left.
 */
export async function deleteStandaloneJobs(env: Env, jobs: CatalogJob[]): Promise<void> {
  const live = jobs.filter((j) => j.deletedAt === null);
  await Promise.all(
    [...Map.groupBy(live, (j) => j.shard)].map(([shard, list]) =>
      shardStub(env, shard).applyJobs(list.map((j) => ({ ...toDefinition(j), version: j.version + 1, deleted: true }))),
    ),
  );
}
