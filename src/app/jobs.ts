import type { z } from "@hono/zod-openapi";
import { ApiError, invalidField, notFound } from "../api/errors";
import { answered } from "../api/refusals";
import type { AuditEntry } from "../catalog/audit";
import { type CatalogJob, getJob, listJobs as listCatalogJobs, toDefinition, updateJob } from "../catalog/jobs";
import { getTenant, type Tenant } from "../catalog/tenants";
import { type ChainField, recordChainPrefixes } from "../model/chains";
import { JOB_ID, newTriggerKey } from "../model/ids";
import { canonicalSchedule, type JobSpec, type Notify, type PatchJobSchema, type Step, type Target } from "../model/job";
import { isLiveAt } from "../model/live-jobs";
import type { BackfillResult, RunView } from "../protocol/shard-rpc";
import type { JobRuntime } from "../protocol/stored-rows";
import { shardStub } from "../stubs";
import { acceptSteps, acceptTarget } from "./accept-targets";
import { audit, entryOf, recordAfter } from "./audit";
import { type Caller, grantOf, mayTouchJob, scopeOf } from "./caller";
import { checkChains } from "./chains";
import { checkIfMatch } from "./job-etag";
import { forgetJobRoom, giveBackJobRoom, quotaExceeded, takeJobRoom } from "./job-room";
import { acceptNotify } from "./notify";
import { jobCursor, type Page, paged } from "./pagination";

/** A job as the catalog holds it, with its shard's runtime view when the shard gave one. */
export interface JobState {
  job: CatalogJob;
  runtime: JobRuntime | undefined;
  /**
   * A job just created: what it was given in clear, sealed in `job`. Its answer shows these as
   * given rather than opening what was just sealed.
   */
  given?: Given;
}

/** The parts of a job sealed at rest, as the request gave them. */
export interface Given {
  target?: Target | undefined;
  steps?: Step[] | undefined;
  notify?: Notify | undefined;
}

/**
 * A job the caller may see, or 404: another tenant's job, or one outside the key's job prefix,
 * is answered exactly like an unknown one.
 */
export async function loadJob(env: Env, caller: Caller, id: string, opts: { includeDeleted?: boolean } = {}): Promise<CatalogJob> {
  const job = JOB_ID.test(id) ? await getJob(env.DB, id, opts) : null;
  if (!job || !mayTouchJob(caller, job)) throw notFound("job", id);
  return job;
}

/** A key limited to a prefix of job names names only jobs under it: 403 naming the field. */
export function checkJobName(caller: Caller, name: string | null | undefined, field = "name"): void {
  const { jobPrefix } = grantOf(caller);
  if (jobPrefix !== null && !name?.startsWith(jobPrefix)) {
    throw new ApiError(403, "insufficient_scope", `${field}: this key may only name jobs "${jobPrefix}…"`, {}, [
      { path: field, message: `must start with "${jobPrefix}"` },
    ]);
  }
}

/** What the audit log keeps of a job: its name and definition (redacted by entryOf). */
export const jobRecord = (job: { name: string | null; spec: JobSpec }) => ({ name: job.name, spec: job.spec });

const jobEntry = (caller: Caller, job: CatalogJob, action: string, before: unknown, after: unknown): AuditEntry =>
  entryOf(caller, { tenantId: job.tenantId, action, subject: job.id, before, after });

export async function listJobs(env: Env, caller: Caller, query: { limit: number; cursor?: string }): Promise<Page<JobState>> {
  const prefix = grantOf(caller).jobPrefix;
  const page = await paged(jobCursor, query, (limit, before) => listCatalogJobs(env.DB, scopeOf(caller), limit, before, prefix));
  const runtimes = await runtimesOf(env, page.items);
  return { items: page.items.map((job) => ({ job, runtime: runtimes.get(job.id) })), nextCursor: page.nextCursor };
}

export async function readJob(env: Env, caller: Caller, id: string): Promise<JobState> {
  const job = await loadJob(env, caller, id);
  const runtimes = await runtimesOf(env, [job]);
  return { job, runtime: runtimes.get(job.id) };
}

/** Runtime views (next fire, completed) for a page of jobs: one call per shard, not one per job. */
async function runtimesOf(env: Env, page: CatalogJob[]): Promise<Map<string, JobRuntime>> {
  const byShard = Map.groupBy(page, (job) => job.shard);
  const answers = await Promise.all([...byShard].map(([shard, list]) => shardStub(env, shard).jobRuntimes(list.map((j) => j.id))));
  return new Map(answers.flat().map((r) => [r.id, r]));
}

/**
 * Applies a pause, resume or delete in D1, then has the shard confirm it. The answer is given
 * only after the shard applied it, so once a pause or delete is answered no run of the job
 * starts. If the shard cannot be reached the client gets 503 and may repeat the call:
 * repeating is harmless. With `ifMatch`, only the job as the client saw it changes (412 else).
 */
export async function changeJob(
  env: Env,
  caller: Caller,
  id: string,
  change: { paused?: boolean; deleted?: boolean },
  ifMatch?: string,
): Promise<JobState> {
  const opts = { includeDeleted: change.deleted === true };
  const current = await loadJob(env, caller, id, opts);
  checkIfMatch(current, ifMatch);
  const alreadyThere = change.deleted ? current.deletedAt !== null : current.paused === change.paused;
  const action = change.deleted ? "job.delete" : change.paused ? "job.pause" : "job.resume";
  const entry = change.deleted
    ? jobEntry(caller, current, action, jobRecord(current), { deleted: true })
    : jobEntry(caller, current, action, { paused: current.paused }, { paused: change.paused });
  // One column set whatever the rest is: nothing of a change made meanwhile is lost, so only
  // a condition the client gave makes it a compare-and-set.
  const job = alreadyThere
    ? current
    : await updateJob(env.DB, id, change, Date.now(), ifMatch === undefined ? undefined : current.version, [
        audit(env.DB, entry, { ifChanged: true }),
      ]);
  if (!job) {
    if (ifMatch !== undefined) checkIfMatch(await loadJob(env, caller, id, opts), ifMatch);
    throw notFound("job", id);
  }
  // A tenant's deletion frees its place under maxJobs at once; the admin's is found by the gate's next recount.
  if (change.deleted && !alreadyThere && !caller.admin) await giveBackJobRoom(env, caller.tenant, [job]);
  return { job, runtime: await confirmWithShard(env, job) };
}

/** Hands a changed job to its shard; 503 (safe to repeat) when the shard cannot confirm. */
async function confirmWithShard(env: Env, job: CatalogJob): Promise<JobRuntime | undefined> {
  try {
    const [runtime] = await shardStub(env, job.shard).applyJobs([toDefinition(job)]);
    return runtime;
  } catch (err) {
    console.error(`job ${job.id}: shard ${job.shard} did not confirm the change`, err);
    throw new ApiError(503, "shard_unavailable", "the change is saved but its shard has not confirmed it yet; repeat the request", {
      "Retry-After": "1",
    });
  }
}

/** Compare-and-set attempts of a PATCH before it gives up (409): each lost to a change made meanwhile. */
const PATCH_ATTEMPTS = 10;

/**
 * Fields given replace the job's whole; the rest stay; null clears an optional setting. The
 * patch is applied to the job as read and written only if the job is still at that version
 * (a compare-and-set): a change made meanwhile is never overwritten. Without `ifMatch` the
 * patch is applied again to the job as it then is; with it, the client's view is stale: 412.
 */
export async function patchJob(
  env: Env,
  caller: Caller,
  id: string,
  patch: z.infer<typeof PatchJobSchema>,
  ifMatch?: string,
): Promise<JobState> {
  const { name, ...fields } = patch;
  if (name !== undefined) checkJobName(caller, name);
  for (let attempt = 1; attempt <= PATCH_ATTEMPTS; attempt++) {
    const current = await loadJob(env, caller, id);
    checkIfMatch(current, ifMatch);
    const now = Date.now();
    const spec = await patchedSpec(env, caller, current, fields, now);
    const after = { name: name === undefined ? current.name : name, spec };
    const entry = jobEntry(caller, current, "job.patch", jobRecord(current), after);
    const revived = revives(current, spec, now) ? await roomToRevive(env, current) : null;
    const job = await updateJob(
      env.DB,
      id,
      { spec, ...(name !== undefined && { name }) },
      now,
      current.version,
      [audit(env.DB, entry, { ifChanged: true })],
      revived && { epoch: revived.epoch },
    );
    if (job) return { job, runtime: await confirmWithShard(env, job) };
    if (revived) forgetJobRoom(revived.tenant.id);
  }
  throw new ApiError(409, "conflict", `the job kept changing while this change was applied (${PATCH_ATTEMPTS} times); repeat the request`);
}

/** A change that gives a finished job (src/model/live-jobs.ts) an instant to come makes it live again: it needs a place under maxJobs. */
const revives = (current: CatalogJob, spec: JobSpec, now: number): boolean =>
  !isLiveAt(current, now) && isLiveAt({ spec, deletedAt: null }, now);

/**
 * Room for a job made live again, leased from its tenant's gate (null `epoch`: the tenant has no
 * quota); 403 when there is none. The tenant is read again, not taken from the caller's key: a
 * revival is rare, and its quota must be the one in force.
 */
async function roomToRevive(env: Env, job: CatalogJob): Promise<{ tenant: Tenant; epoch: number | null }> {
  const tenant = await getTenant(env.DB, job.tenantId);
  if (!tenant) throw notFound("job", job.id);
  const room = await takeJobRoom(env, tenant, 1, false);
  if ("retryAfterMs" in room) throw quotaExceeded(tenant);
  return { tenant, epoch: room.epoch };
}

async function patchedSpec(
  env: Env,
  caller: Caller,
  current: CatalogJob,
  fields: Omit<z.infer<typeof PatchJobSchema>, "name">,
  now: number,
) {
  const { id } = current;
  const {
    jitter,
    maxConcurrency,
    ratePerSecond,
    flowControl,
    retention,
    pauseAfterFailures,
    notify,
    onSuccess,
    onFailure,
    target,
    steps,
    ...rest
  } = fields;
  const spec: JobSpec = { ...current.spec, ...definedOnly(rest) };
  if (rest.schedule) spec.schedule = canonicalSchedule(rest.schedule, now);
  // A job stays what it was made: one target, or a workflow (a run in flight keeps its meaning).
  if (target && current.spec.steps) throw invalidField("target", "a workflow job has steps, not a target; change its steps");
  if (steps && !current.spec.steps) throw invalidField("steps", "a single-target job has a target, not steps; change its target");
  if (target) spec.target = await acceptTarget(env, target, id);
  if (steps) spec.steps = await acceptSteps(env, steps, id);
  // null clears an optional setting; absent leaves it as it is.
  for (const [key, value] of [
    ["jitter", jitter],
    ["maxConcurrency", maxConcurrency],
    ["ratePerSecond", ratePerSecond],
    ["flowControl", flowControl],
    ["retention", retention],
    ["pauseAfterFailures", pauseAfterFailures],
    ["notify", notify && (await acceptNotify(env, notify, current.tenantId))],
    ["onSuccess", onSuccess],
    ["onFailure", onFailure],
  ] as const) {
    if (value === null) delete spec[key];
    else if (value !== undefined) (spec as Record<string, unknown>)[key] = value;
  }
  const setter = {
    jobPrefix: grantOf(caller).jobPrefix,
    fields: (["onSuccess", "onFailure"] as const).filter((f): f is ChainField => fields[f] !== undefined),
  };
  if (onSuccess || onFailure) await checkChains(env.DB, current, spec, setter);
  return recordChainPrefixes(spec, setter);
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

export async function backfill(env: Env, caller: Caller, id: string, range: { from: string; to: string }): Promise<BackfillResult> {
  const job = await loadJob(env, caller, id);
  const answer = await shardStub(env, job.shard).backfill(job.id, Date.parse(range.from), Date.parse(range.to));
  const result = answered(answer, { call: "backfill", id: job.id });
  await recordAfter(env.DB, jobEntry(caller, job, "job.backfill", null, { ...range, created: result.created.length }));
  return result;
}

/** One run now; the same idempotency key always yields the same run. */
export async function trigger(env: Env, caller: Caller, id: string, idempotencyKey: string | undefined): Promise<RunView> {
  const job = await loadJob(env, caller, id);
  const answer = await shardStub(env, job.shard).trigger(job.id, { triggerKey: idempotencyKey ?? newTriggerKey() });
  const run = answered(answer, { call: "trigger", id: job.id });
  await recordAfter(env.DB, jobEntry(caller, job, "job.trigger", null, { runId: run.id }));
  return run;
}
