import { type CatalogJob, countSealedUnderAnotherKey, jobsSealedUnderAnotherKey, replaceSpec } from "../catalog/jobs";
import { countTopicsSealedUnderAnotherKey, resealTopicRow, topicsSealedUnderAnotherKey } from "../catalog/qstash";
import type { SweepState } from "../catalog/sweep-state";
import { countTenantsSealedUnderAnotherKey, replaceTenantNotify, tenantsSealedUnderAnotherKey } from "../catalog/tenants";
import type { JobSpec } from "../model/job";
import { resealCallbacks } from "../qstash/sealed-callbacks";
import { openEndpoints, sealEndpoints } from "../qstash/sealed-urls";
import { resealNotify } from "../security/notify-urls";
import { currentKeyId, resealTarget } from "../security/targets";
import type { Meter } from "./budget";

/** Jobs re-sealed per sweep, each one D1 write: a rotation spreads over minutes, not one long sweep. */
export const RESEAL_PER_SWEEP = 100;
/** The queries that count what is left at a round's end: jobs, tenants, URL groups. */
const COUNTS = 3;

/**
 * What a finished round records: the key, and what this release seals. A round finished by a
 * release that left URLs in clear recorded the key alone, and one that skipped QStash schedules'
 * callbacks `+url`, so after the upgrade its mark no longer matches and one more round seals
 * what it left.
 */
export const roundMark = (kid: string) => `${kid}+url+callbacks`;

/**
 * After ENCRYPTION_KEYS gets a new first key, every target and notification receiver sealed
 * under an older one is sealed again under the new one, in the background, so that the old key
 * can be dropped without a PATCH of every job (docs/security.md, "Rotating every secret"); one
 * stored before URLs were sealed has its URL sealed the same way, and a QStash schedule its
 * callbacks (URLs and forwarded headers), those stored in clear too. Each job is re-sealed at a new
 * version, which the change feed then delivers to its shard; a tenant too, which the
 * consistency pass hands to its shards; and a QStash URL group's endpoints.
 *
 * A round begins with a page of tenants and one of URL groups, then goes through the jobs by id, RESEAL_PER_SWEEP per
 * sweep. At its end it counts what is left (GET /metrics:
 * edgecron_targets_sealed_under_old_keys): none, and the state remembers the key, so later
 * sweeps skip the search until the first key changes again; some (a target whose key already
 * left the ring cannot be opened: each is logged), and a new round begins.
 */
export async function resealTargets(env: Env, db: D1Database, meter: Meter, state: SweepState, reserve: number): Promise<number> {
  const kid = await currentKeyId(env.ENCRYPTION_KEYS).catch(() => null);
  if (kid === null || state.reseal.under === roundMark(kid)) return 0;
  // A round begins with the tenants' default receivers and the URL groups: few, so a page of each.
  let resealed = 0;
  if (state.reseal.after === "") {
    resealed += await resealTenants(env, db, meter, kid, reserve);
    resealed += await resealUrlGroups(env, db, meter, kid, reserve);
  }
  // One query to find, three to count at a round's end, and a write per job.
  const room = Math.min(RESEAL_PER_SWEEP, meter.d1Left - reserve - COUNTS);
  if (room < 1) return resealed;
  const jobs = await jobsSealedUnderAnotherKey(db, kid, room, state.reseal.after);
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
  const remaining =
    (await countSealedUnderAnotherKey(db, kid)) +
    (await countTenantsSealedUnderAnotherKey(db, kid)) +
    (await countTopicsSealedUnderAnotherKey(db, kid));
  state.reseal = { under: remaining === 0 ? roundMark(kid) : null, after: "", remaining };
  return resealed;
}

/** Up to a page of tenants' default receivers sealed again under the current key; how many were. */
async function resealTenants(env: Env, db: D1Database, meter: Meter, kid: string, reserve: number): Promise<number> {
  // One query to find, a write per tenant; room is kept for the jobs' search and the counts.
  const room = Math.min(RESEAL_PER_SWEEP, meter.d1Left - reserve - 2 - COUNTS);
  if (room < 1) return 0;
  let resealed = 0;
  for (const tenant of await tenantsSealedUnderAnotherKey(db, kid, room)) {
    try {
      if (await replaceTenantNotify(db, tenant, await resealNotify(env.ENCRYPTION_KEYS, tenant.notify!, tenant.id))) resealed++;
    } catch (err) {
      console.error(`tenant ${tenant.id}: notification URL not re-sealed: ${(err as Error).message}`);
    }
  }
  return resealed;
}

/** Up to a page of URL groups' endpoints sealed again under the current key; how many were. */
async function resealUrlGroups(env: Env, db: D1Database, meter: Meter, kid: string, reserve: number): Promise<number> {
  const room = Math.min(RESEAL_PER_SWEEP, meter.d1Left - reserve - 2 - COUNTS);
  if (room < 1) return 0;
  let resealed = 0;
  for (const topic of await topicsSealedUnderAnotherKey(db, kid, room)) {
    try {
      const endpoints = await openEndpoints(env.ENCRYPTION_KEYS, topic.endpoints, topic.tenantId, topic.name);
      const sealed = await sealEndpoints(env.ENCRYPTION_KEYS, endpoints, topic.tenantId, topic.name);
      if (await resealTopicRow(db, topic.tenantId, topic, sealed)) resealed++;
    } catch (err) {
      console.error(`URL group ${topic.name} of tenant ${topic.tenantId}: endpoints not re-sealed: ${(err as Error).message}`);
    }
  }
  return resealed;
}

/** The job's spec with its target, its steps' targets, its receiver and its QStash callbacks sealed under the current key. */
async function resealSpec(env: Env, job: CatalogJob): Promise<JobSpec> {
  const spec = { ...job.spec };
  if (spec.notify) spec.notify = await resealNotify(env.ENCRYPTION_KEYS, spec.notify, job.tenantId);
  if (spec.target) spec.target = await resealTarget(env.ENCRYPTION_KEYS, spec.target, job.id);
  // A schedule's callbacks are sealed under its tenant, not the job: they are sealed apart.
  const qstash = spec.target?.qstash;
  if (qstash) spec.target = { ...spec.target!, qstash: await resealCallbacks(env.ENCRYPTION_KEYS, qstash, job.tenantId) };
  if (spec.steps) {
    spec.steps = await Promise.all(
      spec.steps.map(async (step) => ({ ...step, target: await resealTarget(env.ENCRYPTION_KEYS, step.target, job.id) })),
    );
  }
  return spec;
}
