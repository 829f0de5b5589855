import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { type CatalogJob, getJob, insertJob, listJobs, toDefinition, updateJob } from "../catalog/jobs";
import { getTenant, settingsOf } from "../catalog/tenants";
import { config } from "../config";
import { failpoint } from "../faults";
import { PageQuery, pageOf } from "../model/common";
import { DEFAULT_TENANT, JOB_ID, newJobId, newTriggerKey, shardFor, TRIGGER_KEY } from "../model/ids";
import { BackfillSchema, CreateJobSchema, canonicalSchedule, JobSchema, type JobSpec, PatchJobSchema, type Target } from "../model/job";
import { RunSchema } from "../model/run";
import { firstFire } from "../schedule/next-fire";
import { targetRefusal } from "../security/target-guard";
import { sealTarget, viewTarget } from "../security/targets";
import { type JobRuntime, MAX_BACKFILL } from "../shard/contract";
import { shardStub } from "../stubs";
import { type AppContext, type AppEnv, ownsTenant, scopeOf } from "./context";
import { ApiError, invalidField, notFound } from "./errors";
import { presentJob, presentRun } from "./present";
import { bearer, errors, json, pathId } from "./route-parts";
import { validationHook } from "./validation";

export const jobs = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const IdParam = pathId("job_0mihx2k3f8a1b2c3d4e5");
const security = bearer;

// ---- create ----

jobs.openapi(
  createRoute({
    method: "post",
    path: "/jobs",
    summary: "Create a job",
    security,
    request: { body: { content: { "application/json": { schema: CreateJobSchema } }, required: true } },
    responses: { 201: json(JobSchema, "the job, with its first fire"), ...errors(400, 403) },
  }),
  async (c) => {
    const { name, ...fields } = c.req.valid("json");
    const caller = c.var.caller;
    const tenant = caller.admin ? await getTenant(c.env.DB, DEFAULT_TENANT) : caller.tenant;
    if (!tenant) throw new Error(`tenant ${DEFAULT_TENANT} is missing: are the D1 migrations applied?`);
    const now = Date.now();
    const id = newJobId(now);
    const job: CatalogJob = {
      id,
      tenantId: tenant.id,
      name: name ?? null,
      shard: shardFor(id, config(c.env).shardCount),
      version: 1,
      spec: { ...fields, schedule: canonicalSchedule(fields.schedule, now), target: await acceptTarget(c, fields.target, id) },
      paused: false,
      createdAt: now,
      updatedAt: now,
      deletedAt: null,
    };
    if (!(await insertJob(c.env.DB, job, tenant.limits.maxJobs))) {
      throw new ApiError(403, "quota_exceeded", `this tenant may have at most ${tenant.limits.maxJobs} jobs; delete one first`);
    }
    failpoint("api.afterCatalogWrite");
    let runtime: JobRuntime | undefined;
    try {
      [runtime] = await shardStub(c.env, job.shard).applyJobs([toDefinition(job)], [settingsOf(tenant)]);
    } catch (err) {
      // The job is in the catalog; the next sweep hands it to its shard. Its first fire is
      // the same pure function the shard uses, so the answer stays true.
      console.error(`job ${id}: shard ${job.shard} unreachable, left to the sweep`, err);
      runtime = { id, version: 1, nextRunAt: firstFire(job.spec.schedule, now), completed: false };
    }
    return c.json(await present(c, job, runtime), 201);
  },
);

/** The SSRF guard's verdict at creation, then the target sealed for storage. */
async function acceptTarget(c: AppContext, target: Target, jobId: string) {
  const refusal = targetRefusal(target.url, { allowPrivate: config(c.env).allowPrivateTargets });
  if (refusal) throw invalidField("target.url", refusal);
  return sealTarget(c.env.ENCRYPTION_KEYS, target, jobId);
}

async function present(c: AppContext, job: CatalogJob, runtime: JobRuntime | undefined) {
  return presentJob(job, await viewTarget(c.env.ENCRYPTION_KEYS, job.spec.target, job.id), runtime);
}

// ---- read ----

jobs.openapi(
  createRoute({
    method: "get",
    path: "/jobs",
    summary: "List jobs, newest first",
    security,
    request: { query: PageQuery },
    responses: { 200: json(pageOf(JobSchema), "a page of jobs"), ...errors(400) },
  }),
  async (c) => {
    const { limit, cursor } = c.req.valid("query");
    if (cursor !== undefined && !JOB_ID.test(cursor)) throw new ApiError(400, "invalid_request", "cursor: not a cursor this API returned");
    const rows = await listJobs(c.env.DB, scopeOf(c), limit + 1, cursor);
    const page = rows.slice(0, limit);
    const runtimes = await runtimesOf(c.env, page);
    return c.json(
      {
        items: await Promise.all(page.map((job) => present(c, job, runtimes.get(job.id)))),
        nextCursor: rows.length > limit ? page[page.length - 1]!.id : null,
      },
      200,
    );
  },
);

/** Runtime views (next fire, completed) for a page of jobs: one call per shard, not one per job. */
async function runtimesOf(env: Env, page: CatalogJob[]): Promise<Map<string, JobRuntime>> {
  const byShard = Map.groupBy(page, (job) => job.shard);
  const answers = await Promise.all([...byShard].map(([shard, list]) => shardStub(env, shard).jobRuntimes(list.map((j) => j.id))));
  return new Map(answers.flat().map((r) => [r.id, r]));
}

jobs.openapi(
  createRoute({
    method: "get",
    path: "/jobs/{id}",
    summary: "Get a job",
    security,
    request: { params: IdParam },
    responses: { 200: json(JobSchema, "the job"), ...errors(404) },
  }),
  async (c) => {
    const job = await loadJob(c, c.req.valid("param").id);
    const runtimes = await runtimesOf(c.env, [job]);
    return c.json(await present(c, job, runtimes.get(job.id)), 200);
  },
);

// ---- change: pause, resume, delete ----

/**
 * Applies a change in D1, then has the shard confirm it. The 2xx is sent only after the shard
 * applied it, so once a pause or delete is answered no run of the job starts. If the shard
 * cannot be reached the client gets 503 and may repeat the call: repeating is harmless.
 */
async function changeJob(c: AppContext, id: string, change: { paused?: boolean; deleted?: boolean }) {
  const current = await loadJob(c, id, { includeDeleted: change.deleted === true });
  const alreadyThere = change.deleted ? current.deletedAt !== null : current.paused === change.paused;
  const job = alreadyThere ? current : await updateJob(c.env.DB, id, change, Date.now());
  if (!job) throw notFound("job", id);
  return { job, runtime: await confirmWithShard(c, job) };
}

/** Hands a changed job to its shard; 503 (safe to repeat) when the shard cannot confirm. */
async function confirmWithShard(c: AppContext, job: CatalogJob): Promise<JobRuntime | undefined> {
  try {
    const [runtime] = await shardStub(c.env, job.shard).applyJobs([toDefinition(job)]);
    return runtime;
  } catch (err) {
    console.error(`job ${job.id}: shard ${job.shard} did not confirm the change`, err);
    throw new ApiError(503, "shard_unavailable", "the change is saved but its shard has not confirmed it yet; repeat the request", {
      "Retry-After": "1",
    });
  }
}

for (const action of ["pause", "resume"] as const) {
  jobs.openapi(
    createRoute({
      method: "post",
      path: `/jobs/{id}/${action}`,
      summary: action === "pause" ? "Pause a job: no run starts after the answer" : "Resume a paused job from now on",
      security,
      request: { params: IdParam },
      responses: { 200: json(JobSchema, "the job"), ...errors(404, 503) },
    }),
    async (c) => {
      const { job, runtime } = await changeJob(c, c.req.valid("param").id, { paused: action === "pause" });
      return c.json(await present(c, job, runtime), 200);
    },
  );
}

jobs.openapi(
  createRoute({
    method: "delete",
    path: "/jobs/{id}",
    summary: "Delete a job: no run starts after the answer; its runs stay readable",
    security,
    request: { params: IdParam },
    responses: { 200: json(z.object({ id: z.string(), deleted: z.literal(true) }), "deleted"), ...errors(404, 503) },
  }),
  async (c) => {
    const { job } = await changeJob(c, c.req.valid("param").id, { deleted: true });
    return c.json({ id: job.id, deleted: true as const }, 200);
  },
);

// ---- change the definition ----

jobs.openapi(
  createRoute({
    method: "patch",
    path: "/jobs/{id}",
    summary: "Change a job's definition atomically",
    description:
      "Fields given replace the job's whole; the rest stay. Fires after the answer use the new version; every run records the version it ran.",
    security,
    request: { params: IdParam, body: { content: { "application/json": { schema: PatchJobSchema } }, required: true } },
    responses: { 200: json(JobSchema, "the job at its new version"), ...errors(400, 404, 503) },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const { name, ...fields } = c.req.valid("json");
    const current = await loadJob(c, id);
    const now = Date.now();
    const { jitter, maxConcurrency, ratePerSecond, target, ...rest } = fields;
    const spec: JobSpec = { ...current.spec, ...definedOnly(rest) };
    if (rest.schedule) spec.schedule = canonicalSchedule(rest.schedule, now);
    if (target) spec.target = await acceptTarget(c, target, id);
    // null clears an optional setting; absent leaves it as it is.
    for (const [key, value] of [
      ["jitter", jitter],
      ["maxConcurrency", maxConcurrency],
      ["ratePerSecond", ratePerSecond],
    ] as const) {
      if (value === null) delete spec[key];
      else if (value !== undefined) (spec as Record<string, unknown>)[key] = value;
    }
    const job = await updateJob(c.env.DB, id, { spec, ...(name !== undefined && { name }) }, now);
    if (!job) throw notFound("job", id);
    return c.json(await present(c, job, await confirmWithShard(c, job)), 200);
  },
);

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

// ---- backfill ----

jobs.openapi(
  createRoute({
    method: "post",
    path: "/jobs/{id}/backfill",
    summary: "Create the runs of every fire in a past (or any) range",
    description: `Idempotent: a fire that already has a run (scheduled or backfilled) is not run again, because run ids are derived from (job, instant). At most ${MAX_BACKFILL} fires per call.`,
    security,
    request: { params: IdParam, body: { content: { "application/json": { schema: BackfillSchema } }, required: true } },
    responses: {
      202: json(
        z.object({ created: z.array(z.string()), existing: z.array(z.string()) }),
        "run ids created, and those that already existed",
      ),
      ...errors(400, 404, 409),
    },
  }),
  async (c) => {
    const job = await loadJob(c, c.req.valid("param").id);
    const { from, to } = c.req.valid("json");
    const answer = await shardStub(c.env, job.shard).backfill(job.id, Date.parse(from), Date.parse(to));
    if (!answer.ok) {
      if (answer.refusal === "unknown_job") throw notFound("job", job.id);
      if (answer.refusal === "job_paused") throw new ApiError(409, "job_paused", "the job is paused: resume it to backfill");
      throw new ApiError(400, "invalid_request", `to: the range holds more than ${MAX_BACKFILL} fires; split it`);
    }
    return c.json(answer.value, 202);
  },
);

// ---- trigger ----

jobs.openapi(
  createRoute({
    method: "post",
    path: "/jobs/{id}/trigger",
    summary: "Run a job once now, besides its schedule",
    description: "Send an Idempotency-Key header to make retries of this call yield the same run.",
    security,
    request: {
      params: IdParam,
      headers: z.object({ "idempotency-key": z.string().regex(TRIGGER_KEY, "1 to 64 letters, digits or dashes").optional() }),
    },
    responses: { 202: json(RunSchema, "the run, queued"), ...errors(400, 404, 409) },
  }),
  async (c) => {
    const job = await loadJob(c, c.req.valid("param").id);
    const key = c.req.valid("header")["idempotency-key"] ?? newTriggerKey();
    const answer = await shardStub(c.env, job.shard).trigger(job.id, key);
    if (!answer.ok) {
      if (answer.refusal === "unknown_job") throw notFound("job", job.id);
      throw new ApiError(409, "job_paused", "the job is paused: resume it to run it");
    }
    return c.json(presentRun(answer.value), 202);
  },
);

// ---- runs of a job ----

/** Runs are paged by (scheduledAt, id), newest first; the cursor carries both. */
const RUN_CURSOR = /^([0-9a-z]{1,12})\.(run_[0-9A-Za-z_-]{1,120})$/;

jobs.openapi(
  createRoute({
    method: "get",
    path: "/jobs/{id}/runs",
    summary: "List a job's runs, newest first",
    security,
    request: { params: IdParam, query: PageQuery },
    responses: { 200: json(pageOf(RunSchema), "a page of runs"), ...errors(400, 404) },
  }),
  async (c) => {
    const job = await loadJob(c, c.req.valid("param").id, { includeDeleted: true });
    const { limit, cursor } = c.req.valid("query");
    let before: { scheduledAt: number; id: string } | undefined;
    if (cursor !== undefined) {
      const match = RUN_CURSOR.exec(cursor);
      if (!match) throw new ApiError(400, "invalid_request", "cursor: not a cursor this API returned");
      before = { scheduledAt: parseInt(match[1]!, 36), id: match[2]! };
    }
    const runs = await shardStub(c.env, job.shard).listRuns(job.id, limit + 1, before);
    const page = runs.slice(0, limit);
    const last = page[page.length - 1];
    return c.json(
      {
        items: page.map(presentRun),
        nextCursor: runs.length > limit && last ? `${last.scheduledAt.toString(36)}.${last.id}` : null,
      },
      200,
    );
  },
);

/** A job the caller may see, or 404: another tenant's job is answered exactly like an unknown one. */
export async function loadJob(c: AppContext, id: string, opts: { includeDeleted?: boolean } = {}): Promise<CatalogJob> {
  const job = JOB_ID.test(id) ? await getJob(c.env.DB, id, opts) : null;
  if (!job || !ownsTenant(c, job.tenantId)) throw notFound("job", id);
  return job;
}
