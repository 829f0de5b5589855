import { type CatalogJob, countSealedUnderAnotherKey, jobsSealedUnderAnotherKey, replaceSpec } from "../catalog/jobs";
import type { SweepState } from "../catalog/sweep-state";
import type { JobSpec } from "../model/job";
import { currentKeyId, resealTarget } from "../security/targets";
import type { Meter } from "./budget";

/** Jobs re-sealed per sweep, each one D1 write: a rotation spreads over minutes, not one long sweep. */
export const RESEAL_PER_SWEEP = 100;

/**
 * After ENCRYPTION_KEYS gets a new first key, every target sealed under an older one is sealed
 * again under the new one, in the background, so that the old key can be dropped without a
 * PATCH of every job (docs/security.md, "Rotating every secret"). Each job is re-sealed at a
 * new version, which the change feed then delivers to its shard.
 *
 * A round goes through the jobs by id, RESEAL_PER_SWEEP per sweep. At its end it counts what is
 * left (GET /metrics: edgecron_targets_sealed_under_old_keys): none, and the state remembers the
 * key, so later sweeps skip the search until the first key changes again; some (a target whose
 * key already left the ring cannot be opened: each is logged), and a new round begins.
 */
export async function resealTargets(env: Env, db: D1Database, meter: Meter, state: SweepState, reserve: number): Promise<number> {
  const kid = await currentKeyId(env.ENCRYPTION_KEYS).catch(() => null);
  if (kid === null || state.reseal.under === kid) return 0;
  // One query to find, one to count at a round's end, and a write per job.
  const room = Math.min(RESEAL_PER_SWEEP, meter.d1Left - reserve - 2);
  if (room < 1) return 0;
  const jobs = await jobsSealedUnderAnotherKey(db, kid, room, state.reseal.after);
  let resealed = 0;
  for (const job of jobs) {
    try {
      if (await replaceSpec(db, job, await resealSpec(env, job), Date.now())) resealed++;
    } catch (err) {
      console.error(`job ${job.id}: target not re-sealed: ${(err as Error).message}`);
    }
  }
  if (jobs.length === room) {
    state.reseal = { ...state.reseal, under: null, after: jobs.at(-1)!.id };
    return resealed;
  }
  const remaining = await countSealedUnderAnotherKey(db, kid);
  state.reseal = { under: remaining === 0 ? kid : null, after: "", remaining };
  return resealed;
}

/** The job's spec with its target and its steps' targets sealed under the current key. */
async function resealSpec(env: Env, job: CatalogJob): Promise<JobSpec> {
  const spec = { ...job.spec };
  if (spec.target) spec.target = await resealTarget(env.ENCRYPTION_KEYS, spec.target, job.id);
  if (spec.steps) {
    spec.steps = await Promise.all(
      spec.steps.map(async (step) => ({ ...step, target: await resealTarget(env.ENCRYPTION_KEYS, step.target, job.id) })),
    );
  }
  return spec;
}
