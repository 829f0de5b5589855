import { getJobsByIds, toDefinition } from "../catalog/jobs";
import { tenantSettingsByIds } from "../catalog/tenants";
import { MAX_BOUND_PARAMETERS } from "../sql";
import type { Meter } from "./budget";

/** Stale jobs handed back per applyJobs call: one statement reads them, one reads their tenants. */
export const REPAIR_CHUNK = MAX_BOUND_PARAMETERS;

/** What repairing one chunk costs: the jobs and their tenants read, one applyJobs. */
export const REPAIR_COST = { d1: 2, calls: 1 } as const;

/**
 * Hands a shard the catalog's definitions of jobs it lacks or holds at an older version, with
 * their tenants' settings (a job of a tenant the shard never heard of must not run unsigned or
 * unlimited meanwhile). Re-delivery is harmless: a shard applies only newer versions
 * (docs/architecture.md, invariant 1). At most REPAIR_CHUNK ids.
 */
export async function redeliver(db: D1Database, shard: ReturnType<Meter["shard"]>, ids: string[]): Promise<number> {
  if (ids.length > REPAIR_CHUNK) throw new Error(`redeliver takes at most ${REPAIR_CHUNK} jobs, not ${ids.length}`);
  const jobs = await getJobsByIds(db, ids);
  if (jobs.length === 0) return 0;
  const tenants = await tenantSettingsByIds(db, [...new Set(jobs.map((j) => j.tenantId))]);
  await shard.applyJobs(jobs.map(toDefinition), tenants);
  return jobs.length;
}
