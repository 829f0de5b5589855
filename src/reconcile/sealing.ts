import { jobsWithUnsealedTargets, replaceSpec } from "../catalog/jobs";
import type { SweepState } from "../catalog/sweep-state";
import type { Target } from "../model/job";
import { sealTarget } from "../security/targets";
import type { Meter } from "./budget";

/** Targets sealed per sweep, each one D1 write: an upgrade spreads over a few minutes instead of one long sweep. */
const SEAL_PER_SWEEP = 100;

/**
 * Jobs stored before targets were sealed hold headers and body in clear, in D1 and in their
 * shard. Each is sealed here at a new version (a new updated_at), which the change feed then
 * delivers to its shard. Once a search finds none, none can appear again (a job is sealed at
 * creation, a change keeps or reseals its target), so the flag in sweep_state spares every
 * later sweep the search, which reads the whole table.
 */
export async function sealOldTargets(env: Env, db: D1Database, meter: Meter, state: SweepState, reserve: number): Promise<number> {
  if (state.targetsSealed) return 0;
  const room = Math.min(SEAL_PER_SWEEP, meter.d1Left - reserve - 1);
  if (room < 1) return 0;
  const jobs = await jobsWithUnsealedTargets(db, room);
  if (jobs.length === 0) {
    state.targetsSealed = true;
    return 0;
  }
  let sealed = 0;
  for (const job of jobs) {
    const target = await sealTarget(env.ENCRYPTION_KEYS, job.spec.target as unknown as Target, job.id);
    if (await replaceSpec(db, job, { ...job.spec, target }, Date.now())) sealed++;
  }
  return sealed;
}
