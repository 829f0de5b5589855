import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { explainJob } from "../app/explain";
import { jobHistory, MAX_HISTORY_SPAN_MS } from "../app/history";
import { backfill, changeJob, createJob, type JobState, listJobs, patchJob, readJob, trigger } from "../app/jobs";
import { listRuns } from "../app/runs";
import { PageQuery, pageOf } from "../model/common";
import { TRIGGER_KEY } from "../model/ids";
import { BackfillSchema, CreateJobSchema, Instant, JobSchema, PatchJobSchema } from "../model/job";
import { RunSchema } from "../model/run";
import { viewTarget } from "../security/targets";
import { MAX_BACKFILL } from "../shard/contract";
import type { AppContext, AppEnv } from "./context";
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
  async (c) => c.json(await present(c, await createJob(c.env, c.var.caller, c.req.valid("json"))), 201),
);

/** A job's target (or each step's) is shown with its body opened and header names only (see viewTarget). */
async function present(c: AppContext, { job, runtime }: JobState) {
  const keys = c.env.ENCRYPTION_KEYS;
  const target = job.spec.target && (await viewTarget(keys, job.spec.target, job.id));
  const steps =
    job.spec.steps &&
    (await Promise.all(job.spec.steps.map(async (step) => ({ ...step, target: await viewTarget(keys, step.target, job.id) }))));
  return presentJob(job, { target, steps }, runtime);
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
    const page = await listJobs(c.env, c.var.caller, c.req.valid("query"));
    return c.json({ items: await Promise.all(page.items.map((state) => present(c, state))), nextCursor: page.nextCursor }, 200);
  },
);

jobs.openapi(
  createRoute({
    method: "get",
    path: "/jobs/{id}",
    summary: "Get a job",
    security,
    request: { params: IdParam },
    responses: { 200: json(JobSchema, "the job"), ...errors(404) },
  }),
  async (c) => c.json(await present(c, await readJob(c.env, c.var.caller, c.req.valid("param").id)), 200),
);

// ---- change: pause, resume, delete ----

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
    async (c) =>
      c.json(await present(c, await changeJob(c.env, c.var.caller, c.req.valid("param").id, { paused: action === "pause" })), 200),
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
    const { job } = await changeJob(c.env, c.var.caller, c.req.valid("param").id, { deleted: true });
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
  async (c) => c.json(await present(c, await patchJob(c.env, c.var.caller, c.req.valid("param").id, c.req.valid("json"))), 200),
);

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
  async (c) => c.json(await backfill(c.env, c.var.caller, c.req.valid("param").id, c.req.valid("json")), 202),
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
    const run = await trigger(c.env, c.var.caller, c.req.valid("param").id, c.req.valid("header")["idempotency-key"]);
    return c.json(presentRun(run), 202);
  },
);

// ---- runs of a job ----

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
    const page = await listRuns(c.env, c.var.caller, c.req.valid("param").id, c.req.valid("query"));
    return c.json({ items: page.items.map(presentRun), nextCursor: page.nextCursor }, 200);
  },
);

// ---- why a fire ran, or did not ----

const ExplainQuery = z.object({
  at: Instant.optional().openapi({ description: "The instant asked about (default: now): the fire at or after it is explained." }),
});

const DecisionSchema = z.object({
  step: z.enum(["schedule", "bounds", "paused", "misfire", "overlap", "jitter", "flow_control", "breaker", "run"]),
  verdict: z
    .enum(["ok", "stops", "may_wait", "may_stop"])
    .openapi({ description: "ok: the fire goes on; stops: it ends here; may_wait / may_stop: it will, if things stay as they are now." }),
  detail: z.string(),
});

const ExplanationSchema = z
  .object({
    jobId: z.string(),
    at: Instant,
    fire: z
      .object({ scheduledAt: Instant, dueAt: Instant.openapi({ description: "scheduledAt plus the job's jitter offset for it." }) })
      .nullable()
      .openapi({ description: "The fire at or after `at`; null when the schedule has none." }),
    runId: z.string().nullable().openapi({ description: "The run that fire becomes (derived from the job and the instant)." }),
    run: RunSchema.nullable(),
    decisions: z.array(DecisionSchema).openapi({ description: "In the order the shard makes them." }),
  })
  .openapi("Explanation");

jobs.openapi(
  createRoute({
    method: "get",
    path: "/jobs/{id}/explain",
    summary: "Why a fire ran or did not: the shard's decisions for the fire at or after an instant",
    description:
      "The schedule's match (and the DST rule that applied), bounds, pause, misfire policy, overlap, jitter, flow control, and the run the fire became, or why there is none; computed by the functions the shard fires by.",
    security,
    request: { params: IdParam, query: ExplainQuery },
    responses: { 200: json(ExplanationSchema, "the explanation"), ...errors(400, 404) },
  }),
  async (c) => {
    const { at } = c.req.valid("query");
    const e = await explainJob(c.env, c.var.caller, c.req.valid("param").id, at === undefined ? Date.now() : Date.parse(at));
    const iso = (ms: number) => new Date(ms).toISOString();
    return c.json(
      {
        jobId: e.jobId,
        at: iso(e.at),
        fire: e.fire && { scheduledAt: iso(e.fire.scheduledAt), dueAt: iso(e.fire.dueAt) },
        runId: e.runId,
        run: e.run && presentRun(e.run),
        decisions: e.decisions,
      },
      200,
    );
  },
);

// ---- archived history ----

const HistoryQuery = z
  .object({ from: Instant, to: Instant })
  .refine((q) => Date.parse(q.to) >= Date.parse(q.from), { message: "to must not be before from", path: ["to"] })
  .refine((q) => Date.parse(q.to) - Date.parse(q.from) <= MAX_HISTORY_SPAN_MS, {
    message: "the range may span at most 31 days; ask again for the next",
    path: ["to"],
  });

jobs.openapi(
  createRoute({
    method: "get",
    path: "/jobs/{id}/history",
    summary: "Stream a job's archived runs (those retention moved out of its shard), oldest first",
    description:
      "Newline-delimited JSON, one run per line with its attempts, for runs scheduled in [from, to] (at most 31 days). Runs still in the shard are at /jobs/{id}/runs.",
    security,
    request: { params: IdParam, query: HistoryQuery },
    responses: {
      200: { content: { "application/x-ndjson": { schema: z.string() } }, description: "one Run (as GET /v1/runs/{id} shows it) per line" },
      ...errors(400, 404),
    },
  }),
  async (c) => {
    const { from, to } = c.req.valid("query");
    const runs = await jobHistory(c.env, c.var.caller, c.req.valid("param").id, Date.parse(from), Date.parse(to));
    const lines = runs.map((run) => `${JSON.stringify(presentRun({ ...run, attempts: run.attemptLog.length }))}\n`);
    // A stream is not one of the typed JSON answers the router checks; the route above documents it.
    return c.body(new Blob(lines).stream(), 200, { "Content-Type": "application/x-ndjson" }) as never;
  },
);
