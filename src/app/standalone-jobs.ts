import { ApiError, notFound } from "../api/errors";
import { type CatalogJob, toDefinition } from "../catalog/jobs";
import { shardsInUse } from "../catalog/shards";
import { config } from "../config";
import { JOB_ID, shardFor } from "../model/ids";
import type { JobDefinition } from "../protocol/stored-rows";
import { shardStub } from "../stubs";
import { type Caller, mayTouchJob, scopeOf } from "./caller";
import { loadJob } from "./jobs";

/**
 * Jobs that their shards alone hold (`standalone`: QStash messages, docs/qstash.md), found
 * without the catalog: a job's id names its shard (`shardFor`, with the shard count of today:
 * after SHARD_COUNT changes, the tenant's other shards are asked too). Each is shown in the
 * catalog's shape, so the /v2 views and the run routes read both kinds alike.
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
    deletedAt: def.deleted ? def.createdAt : null,
    standalone: true,
  };
}

const homeOf = (env: Env, jobId: string) => shardFor(jobId, config(env).shardCount);

async function askShard(env: Env, shard: string, ids: string[]): Promise<CatalogJob[]> {
  return (await shardStub(env, shard).standaloneJobs(ids)).map((def) => asCatalogJob(def, shard));
}

/** A standalone job the caller may see, deleted ones included, or null. */
export async function findStandaloneJob(env: Env, caller: Caller, jobId: string): Promise<CatalogJob | null> {
  if (!JOB_ID.test(jobId)) return null;
  const home = homeOf(env, jobId);
  let [job] = await askShard(env, home, [jobId]);
  // Not where today's shard count puts it: it may be from before SHARD_COUNT changed.
  if (!job) {
    const others = (await shardsInUse(env.DB, scopeOf(caller))).filter((s) => s !== home);
    for (const shard of others) {
      [job] = await askShard(env, shard, [jobId]);
      if (job) break;
    }
  }
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

/** Of `ids`, the standalone jobs their shards hold (by today's shard count), deleted ones included; not checked against a caller. */
export async function standaloneJobsByIds(env: Env, ids: string[]): Promise<CatalogJob[]> {
  const byShard = Map.groupBy(
    ids.filter((id) => JOB_ID.test(id)),
    (id) => homeOf(env, id),
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
  return pages
    .flat()
    .filter((job) => mayTouchJob(caller, job))
    .sort((a, b) => (a.id < b.id ? 1 : -1))
    .slice(0, limit);
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
