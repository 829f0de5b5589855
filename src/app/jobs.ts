import type { z } from "@hono/zod-openapi";
import { ApiError, invalidField, notFound } from "../api/errors";
import { answered } from "../api/refusals";
import { type CatalogJob, getJob, insertJob, listJobs as listCatalogJobs, toDefinition, updateJob } from "../catalog/jobs";
import { getTenant, settingsOf } from "../catalog/tenants";
import { config } from "../config";
import { failpoint } from "../faults";
import { DEFAULT_TENANT, JOB_ID, newJobId, newTriggerKey, shardFor } from "../model/ids";
import {
  type CreateJob,
  canonicalSchedule,
  type JobSpec,
  type PatchJobSchema,
  type Step,
  type StoredStep,
  type Target,
} from "../model/job";
import { firstFire } from "../schedule/next-fire";
import { targetRefusal } from "../security/target-guard";
import { sealTarget } from "../security/targets";
import type { BackfillResult, JobRuntime, RunView } from "../shard/contract";
import { shardStub } from "../stubs";
import { type Caller, ownsTenant, scopeOf } from "./caller";
import { checkChains } from "./chains";
import { acceptNotify } from "./notify";
import { jobCursor, type Page, paged } from "./pagination";

/** A job as the catalog holds it, with its shard's runtime view when the shard gave one. */
export interface JobState {
  job: CatalogJob;
  runtime: JobRuntime | undefined;
}

/** A job the caller may see, or 404: another tenant's job is answered exactly like an unknown one. */
export async function loadJob(env: Env, caller: Caller, id: string, opts: { includeDeleted?: boolean } = {}): Promise<CatalogJob> {
  const job = JOB_ID.test(id) ? await getJob(env.DB, id, opts) : null;
  if (!job || !ownsTenant(caller, job.tenantId)) throw notFound("job", id);
  return job;
}

export async function createJob(env: Env, caller: Caller, input: CreateJob): Promise<JobState> {
  const { name, target, steps, ...fields } = input;
  const tenant = caller.admin ? await getTenant(env.DB, DEFAULT_TENANT) : caller.tenant;
  if (!tenant) throw new Error(`tenant ${DEFAULT_TENANT} is missing: are the D1 migrations applied?`);
  const now = Date.now();
  const id = newJobId(now);
  const job: CatalogJob = {
    id,
    tenantId: tenant.id,
    name: name ?? null,
    shard: shardFor(id, config(env).shardCount),
    version: 1,
    spec: {
      ...fields,
      schedule: canonicalSchedule(fields.schedule, now),
      // The schema let exactly one of them through.
      ...(target && { target: await acceptTarget(env, target, id) }),
      ...(steps && { steps: await acceptSteps(env, steps, id) }),
      ...(fields.notify && { notify: acceptNotify(env, fields.notify) }),
    },
    paused: false,
    pausedReason: null,
    createdAt: now,
    updatedAt: now,
    deletedAt: null,
  };
  await checkChains(env.DB, job, job.spec);
  if (!(await insertJob(env.DB, job, tenant.limits.maxJobs))) {
    throw new ApiError(403, "quota_exceeded", `this tenant may have at most ${tenant.limits.maxJobs} jobs; delete one first`);
  }
  failpoint("api.afterCatalogWrite");
  let runtime: JobRuntime | undefined;
  try {
    [runtime] = await shardStub(env, job.shard).applyJobs([toDefinition(job)], [settingsOf(tenant)]);
  } catch (err) {
    // The job is in the catalog; the next sweep hands it to its shard. Its first fire is
    // the same pure function the shard uses, so the answer stays true.
    console.error(`job ${id}: shard ${job.shard} unreachable, left to the sweep`, err);
    runtime = { id, version: 1, nextRunAt: firstFire(job.spec.schedule, now), completed: false };
  }
  return { job, runtime };
}

/** The SSRF guard's verdict at creation, then the target sealed for storage. */
async function acceptTarget(env: Env, target: Target, jobId: string, field = "target") {
  const refusal = targetRefusal(target.url, { allowPrivate: config(env).allowPrivateTargets });
  if (refusal) throw invalidField(`${field}.url`, refusal);
  return sealTarget(env.ENCRYPTION_KEYS, target, jobId);
}

/** A workflow's steps, each target checked and sealed as a job's target is (bound to the job id). */
async function acceptSteps(env: Env, steps: Step[], jobId: string): Promise<StoredStep[]> {
  return Promise.all(steps.map(async (step, i) => ({ ...step, target: await acceptTarget(env, step.target, jobId, `steps.${i}.target`) })));
}

export async function listJobs(env: Env, caller: Caller, query: { limit: number; cursor?: string }): Promise<Page<JobState>> {
  const page = await paged(jobCursor, query, (limit, before) => listCatalogJobs(env.DB, scopeOf(caller), limit, before));
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
 * repeating is harmless.
 */
export async function changeJob(env: Env, caller: Caller, id: string, change: { paused?: boolean; deleted?: boolean }): Promise<JobState> {
  const current = await loadJob(env, caller, id, { includeDeleted: change.deleted === true });
  const alreadyThere = change.deleted ? current.deletedAt !== null : current.paused === change.paused;
  const job = alreadyThere ? current : await updateJob(env.DB, id, change, Date.now());
  if (!job) throw notFound("job", id);
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

/** Fields given replace the job's whole; the rest stay; null clears an optional setting. */
export async function patchJob(env: Env, caller: Caller, id: string, patch: z.infer<typeof PatchJobSchema>): Promise<JobState> {
  const { name, ...fields } = patch;
  const current = await loadJob(env, caller, id);
  const now = Date.now();
  const { jitter, maxConcurrency, ratePerSecond, retention, pauseAfterFailures, notify, onSuccess, onFailure, target, steps, ...rest } =
    fields;
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
    ["retention", retention],
    ["pauseAfterFailures", pauseAfterFailures],
    ["notify", notify && acceptNotify(env, notify)],
    ["onSuccess", onSuccess],
    ["onFailure", onFailure],
  ] as const) {
    if (value === null) delete spec[key];
    else if (value !== undefined) (spec as Record<string, unknown>)[key] = value;
  }
  if (onSuccess || onFailure) await checkChains(env.DB, current, spec);
  const job = await updateJob(env.DB, id, { spec, ...(name !== undefined && { name }) }, now);
  if (!job) throw notFound("job", id);
  return { job, runtime: await confirmWithShard(env, job) };
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

export async function backfill(env: Env, caller: Caller, id: string, range: { from: string; to: string }): Promise<BackfillResult> {
  const job = await loadJob(env, caller, id);
  const answer = await shardStub(env, job.shard).backfill(job.id, Date.parse(range.from), Date.parse(range.to));
  return answered(answer, { call: "backfill", id: job.id });
}

/** One run now; the same idempotency key always yields the same run. */
export async function trigger(env: Env, caller: Caller, id: string, idempotencyKey: string | undefined): Promise<RunView> {
  const job = await loadJob(env, caller, id);
  const answer = await shardStub(env, job.shard).trigger(job.id, { triggerKey: idempotencyKey ?? newTriggerKey() });
  return answered(answer, { call: "trigger", id: job.id });
}
