import { ApiError, invalidField } from "../api/errors";
import { type CatalogJob, getJobsByIds } from "../catalog/jobs";
import { CHAIN_FIELDS, type ChainSetter } from "../model/chains";
import { type JobSpec, MAX_CHAIN_DEPTH } from "../model/job";

type Chains = Pick<JobSpec, "onSuccess" | "onFailure">;

/**
 * The jobs a job triggers when its runs end (onSuccess/onFailure) are checked when they are
 * saved: each must be a job of the same tenant that is not deleted, and no chain may lead back
 * to the job, since a loop of chained jobs would trigger itself for ever. Each refusal names its
 * field (`onSuccess.1`). Chains are followed through the catalog one level per read (a job
 * names at most 10 jobs), up to MAX_CHAIN_DEPTH levels.
 */
export async function checkChains(
  db: D1Database,
  job: { id: string; tenantId: string },
  chains: Chains,
  setter: ChainSetter,
): Promise<void> {
  const named = CHAIN_FIELDS.flatMap((field) => (chains[field] ?? []).map((id, i) => ({ field, i, id })));
  if (named.length === 0) return;
  const live = await liveJobs(
    db,
    job.tenantId,
    named.map((n) => n.id),
  );
  const { jobPrefix } = setter;
  for (const { field, i, id } of named) {
    // Unknown and outside the prefix answer alike: the key learns nothing of jobs it cannot see.
    if (jobPrefix !== null && setter.fields.includes(field) && !live.get(id)?.name?.startsWith(jobPrefix)) {
      throw new ApiError(403, "insufficient_scope", `${field}.${i}: this key may only chain to jobs named "${jobPrefix}…"`, {}, [
        { path: `${field}.${i}`, message: `must be a job whose name starts with "${jobPrefix}"` },
      ]);
    }
    if (id === job.id) throw invalidField(`${field}.${i}`, "a job cannot trigger itself");
    if (!live.has(id)) throw invalidField(`${field}.${i}`, `no job ${id} in this tenant`);
  }
  for (const { field, i, id } of named) {
    const loop = await pathBack(db, job, live.get(id)!);
    if (loop) throw invalidField(`${field}.${i}`, `the chain would loop: ${[job.id, ...loop].join(" → ")}`);
  }
}

async function liveJobs(db: D1Database, tenantId: string, ids: string[]): Promise<Map<string, CatalogJob>> {
  const found = await getJobsByIds(db, [...new Set(ids)]);
  return new Map(found.filter((j) => j.deletedAt === null && j.tenantId === tenantId).map((j) => [j.id, j]));
}

/** The chain from `start` back to `job`, if its chained jobs lead there (breadth first), else null. */
async function pathBack(db: D1Database, job: { id: string; tenantId: string }, start: CatalogJob): Promise<string[] | null> {
  const cameFrom = new Map<string, string | null>([[start.id, null]]);
  let level = [start];
  for (let depth = 0; depth < MAX_CHAIN_DEPTH && level.length > 0; depth++) {
    const next = new Set<string>();
    for (const j of level) {
      for (const id of [...(j.spec.onSuccess ?? []), ...(j.spec.onFailure ?? [])]) {
        if (cameFrom.has(id)) continue;
        cameFrom.set(id, j.id);
        if (id === job.id) return trace(cameFrom, id);
        next.add(id);
      }
    }
    level = next.size === 0 ? [] : [...(await liveJobs(db, job.tenantId, [...next])).values()];
  }
  return null;
}

function trace(cameFrom: Map<string, string | null>, end: string): string[] {
  const path = [end];
  for (let at = cameFrom.get(end); at; at = cameFrom.get(at)) path.unshift(at);
  return path;
}
