import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { seesSealed } from "../app/caller";
import { createJob } from "../app/create-jobs";
import { explainJob } from "../app/explain";
import { jobHistory, MAX_HISTORY_SPAN_MS } from "../app/history";
import { etagOf, IF_MATCH } from "../app/job-etag";
import { backfill, changeJob, type Given, type JobState, listJobs, patchJob, readJob, trigger } from "../app/jobs";
import { listRuns } from "../app/runs";
import type { CatalogJob } from "../catalog/jobs";
import { PageQuery, pageOf } from "../model/common";
import { TRIGGER_KEY } from "../model/ids";
import { BackfillSchema, CreateJobSchema, Instant, JobSchema, PatchJobSchema } from "../model/job";
import { RunSchema } from "../model/run";
import { MAX_BACKFILL } from "../protocol/shard-rpc";
import { viewGivenNotify, viewNotify } from "../security/notify-urls";
import { viewGivenTarget, viewTarget } from "../security/targets";
import type { AppContext, AppEnv } from "./context";
import {
  AUTHENTICATED,
  badCursor,
  idTooLong,
  invalid,
  JSON_BODY,
  jobNotFound,
  jobPaused,
  noArchive,
  patchConflict,
  preconditionFailed,
  quotaExceeded,
  shardUnavailable,
  tooManyFires,
} from "./error-cases";
import { presentJob, presentRun } from "./present";
import { bearer, errors, json, jsonBody, pathId, withEtag } from "./route-parts";
import { validationHook } from "./validation";

export const jobs = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const IdParam = pathId("job_0mihx2k3f8a1b2c3d4e5");
const security = bearer;
const badId = idTooLong(200);
const tooBigLimit = invalid("limit", "Too big: expected number to be <=200");

/** A change made only if the job is as the client last saw it (src/app/job-etag.ts). */
const IfMatchHeader = z.object({
  "if-match": z
    .string()
    .regex(IF_MATCH, 'an ETag this API answered, e.g. "v3", a list of them, or *')
    .optional()
    .openapi({ description: "Change the job only if its ETag is one of these (412 if not)." }),
});
const badIfMatch = invalid("if-match", 'an ETag this API answered, e.g. "v3", a list of them, or *');

const TARGET = { url: "https://example.com/hooks/report", method: "POST" as const };

const CREATE_EXAMPLES = {
  cron: {
    summary: "Every weekday at 09:00 in Berlin, with retries and no overlap",
    value: {
      name: "morning-report",
      schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" },
      target: { ...TARGET, headers: { Authorization: "Bearer target-secret" }, body: { report: "daily" } },
      retry: { maxAttempts: 5, backoff: { initialMs: 1_000, maxMs: 60_000, factor: 2 } },
      timeoutMs: 60_000,
      overlap: "forbid" as const,
      notify: { url: "https://example.com/hooks/edgecron", on: ["dead" as const, "paused" as const] },
    },
  },
  every: {
    summary: "Every 30 seconds, at most 2 runs at once, spread over 5 seconds",
    value: {
      schedule: { every: "30s" },
      target: { url: "https://example.com/hooks/poll", method: "GET" as const },
      maxConcurrency: 2,
      jitter: "5s",
    },
  },
  oneOff: {
    summary: "Once, ten minutes from now",
    value: { name: "send-reminder", schedule: { delay: "10m" }, target: { ...TARGET, body: { user: "u_123" } } },
  },
};

const PATCH_EXAMPLES = {
  schedule: {
    summary: "Move it to 07:30 and stop jittering",
    value: { schedule: { cron: "30 7 * * *", timezone: "Europe/Berlin" }, jitter: null },
  },
  target: { summary: "Point it at a new URL", value: { target: { ...TARGET, url: "https://example.com/hooks/report-v2" } } },
};

// ---- create ----

jobs.openapi(
  createRoute({
    method: "post",
    path: "/jobs",
    tags: ["Jobs"],
    summary: "Create a job",
    security,
    request: { body: jsonBody(CreateJobSchema, CREATE_EXAMPLES) },
    responses: {
      201: withEtag(json(JobSchema, "the job, with its first fire")),
      ...errors(invalid("schedule.cron", "invalid cron expression"), JSON_BODY, quotaExceeded, AUTHENTICATED),
    },
  }),
  async (c) => answerJob(c, await createJob(c.env, c.var.caller, c.req.valid("json")), 201),
);

/** A job's answer carries its ETag, so that the client can make its next change conditional on it. */
async function answerJob<S extends 200 | 201>(c: AppContext, state: JobState, status: S) {
  c.header("ETag", etagOf(state.job));
  return c.json(await present(c, state), status);
}

/**
 * A job's target (or each step's) is shown with header names only, its URL and body opened to a
 * caller who sees sealed values whole, reduced to a `read` key (see viewTarget); its
 * notification URL likewise. A job just created shows them as the request gave them: nothing
 * sealed is opened again only to be shown.
 */
export async function present(c: AppContext, { job, runtime, given }: JobState) {
  const keys = c.env.ENCRYPTION_KEYS;
  const whole = seesSealed(c.var.caller);
  if (given) return presentJob(job, await givenViews(job, given, whole), runtime);
  const target = job.spec.target && (await viewTarget(keys, job.spec.target, job.id, whole));
  const steps =
    job.spec.steps &&
    (await Promise.all(job.spec.steps.map(async (step) => ({ ...step, target: await viewTarget(keys, step.target, job.id, whole) }))));
  const notify = job.spec.notify && (await viewNotify(keys, job.spec.notify, job.tenantId, whole));
  return presentJob(job, { target, steps, notify }, runtime);
}

async function givenViews(job: CatalogJob, given: Given, whole: boolean) {
  const target = given.target && (await viewGivenTarget(given.target, whole));
  const steps =
    job.spec.steps &&
    given.steps &&
    (await Promise.all(
      job.spec.steps.map(async (step, i) => ({ ...step, target: await viewGivenTarget(given.steps![i]!.target, whole) })),
    ));
  const notify = given.notify && viewGivenNotify(given.notify, whole);
  return { target, steps, notify };
}

// ---- read ----

jobs.openapi(
  createRoute({
    method: "get",
    path: "/jobs",
    tags: ["Jobs"],
    summary: "List jobs, newest first",
    security,
    request: { query: PageQuery },
    responses: { 200: json(pageOf(JobSchema), "a page of jobs"), ...errors(tooBigLimit, badCursor, AUTHENTICATED) },
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
    tags: ["Jobs"],
    summary: "Get a job",
    security,
    request: { params: IdParam },
    responses: { 200: withEtag(json(JobSchema, "the job")), ...errors(badId, jobNotFound, AUTHENTICATED) },
  }),
  async (c) => answerJob(c, await readJob(c.env, c.var.caller, c.req.valid("param").id), 200),
);

// ---- change: pause, resume, delete ----

for (const action of ["pause", "resume"] as const) {
  jobs.openapi(
    createRoute({
      method: "post",
      path: `/jobs/{id}/${action}`,
      tags: ["Jobs"],
      summary: action === "pause" ? "Pause a job: no run is dispatched after the answer" : "Resume a paused job from now on",
      security,
      request: { params: IdParam, headers: IfMatchHeader },
      responses: {
        200: withEtag(json(JobSchema, "the job")),
        ...errors(badId, badIfMatch, jobNotFound, preconditionFailed, AUTHENTICATED, shardUnavailable),
      },
    }),
    async (c) => {
      const change = { paused: action === "pause" };
      return answerJob(c, await changeJob(c.env, c.var.caller, c.req.valid("param").id, change, c.req.valid("header")["if-match"]), 200);
    },
  );
}

jobs.openapi(
  createRoute({
    method: "delete",
    path: "/jobs/{id}",
    tags: ["Jobs"],
    summary: "Delete a job: no run is dispatched after the answer; its runs stay readable",
    security,
    request: { params: IdParam, headers: IfMatchHeader },
    responses: {
      200: json(z.object({ id: z.string(), deleted: z.literal(true) }), "deleted"),
      ...errors(badId, badIfMatch, jobNotFound, preconditionFailed, AUTHENTICATED, shardUnavailable),
    },
  }),
  async (c) => {
    const { job } = await changeJob(c.env, c.var.caller, c.req.valid("param").id, { deleted: true }, c.req.valid("header")["if-match"]);
    return c.json({ id: job.id, deleted: true as const }, 200);
  },
);

// ---- change the definition ----

jobs.openapi(
  createRoute({
    method: "patch",
    path: "/jobs/{id}",
    tags: ["Jobs"],
    summary: "Change a job's definition atomically",
    description:
      "Fields given replace the job's whole; the rest stay. Fires after the answer use the new version; every run records the version it ran. Concurrent changes never undo one another: each is applied to the job as it is when written. Send If-Match with the job's ETag to change it only as you last read it (412 if it changed since). A change that gives a finished job an instant to come (a one-off's `at` moved ahead, an `endAt` that passed moved on) makes it live again: it needs a place under the tenant's `maxJobs` (403 if there is none).",
    security,
    request: { params: IdParam, headers: IfMatchHeader, body: jsonBody(PatchJobSchema, PATCH_EXAMPLES) },
    responses: {
      200: withEtag(json(JobSchema, "the job at its new version")),
      ...errors(
        invalid("(body)", "give at least one field to change"),
        badIfMatch,
        JSON_BODY,
        jobNotFound,
        patchConflict,
        preconditionFailed,
        quotaExceeded,
        AUTHENTICATED,
        shardUnavailable,
      ),
    },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    return answerJob(c, await patchJob(c.env, c.var.caller, id, c.req.valid("json"), c.req.valid("header")["if-match"]), 200);
  },
);

// ---- backfill ----

jobs.openapi(
  createRoute({
    method: "post",
    path: "/jobs/{id}/backfill",
    tags: ["Jobs"],
    summary: "Create the runs of every fire in a past (or any) range",
    description: `Idempotent: a fire that already has a run (scheduled or backfilled) is not run again, because run ids are derived from (job, instant). At most ${MAX_BACKFILL} fires per call.`,
    security,
    request: {
      params: IdParam,
      body: jsonBody(BackfillSchema, {
        day: { summary: "Every fire of one day", value: { from: "2026-11-01T00:00:00Z", to: "2026-11-01T23:59:59Z" } },
      }),
    },
    responses: {
      202: json(
        z.object({ created: z.array(z.string()), existing: z.array(z.string()) }),
        "run ids created, and those that already existed",
      ),
      ...errors(invalid("to", "to must not be before from"), tooManyFires, JSON_BODY, jobNotFound, jobPaused("backfill"), AUTHENTICATED),
    },
  }),
  async (c) => c.json(await backfill(c.env, c.var.caller, c.req.valid("param").id, c.req.valid("json")), 202),
);

// ---- trigger ----

jobs.openapi(
  createRoute({
    method: "post",
    path: "/jobs/{id}/trigger",
    tags: ["Jobs"],
    summary: "Run a job once now, besides its schedule",
    description: "Send an Idempotency-Key header to make retries of this call yield the same run.",
    security,
    request: {
      params: IdParam,
      headers: z.object({ "idempotency-key": z.string().regex(TRIGGER_KEY, "1 to 64 letters, digits or dashes").optional() }),
    },
    responses: {
      202: json(RunSchema, "the run, dispatched (running), or waiting when flow control holds it"),
      ...errors(invalid("idempotency-key", "1 to 64 letters, digits or dashes"), jobNotFound, jobPaused("trigger"), AUTHENTICATED),
    },
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
    tags: ["Jobs"],
    summary: "List a job's runs, newest first",
    security,
    request: { params: IdParam, query: PageQuery },
    responses: { 200: json(pageOf(RunSchema), "a page of runs"), ...errors(tooBigLimit, badCursor, badId, jobNotFound, AUTHENTICATED) },
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
    tags: ["Jobs"],
    summary: "Why a fire ran or did not: the shard's decisions for the fire at or after an instant",
    description:
      "The schedule's match (and the DST rule that applied), bounds, pause, misfire policy, overlap, jitter, flow control, and the run the fire became, or why there is none; computed by the functions the shard fires by.",
    security,
    request: { params: IdParam, query: ExplainQuery },
    responses: {
      200: json(ExplanationSchema, "the explanation"),
      ...errors(invalid("at", "must be an ISO-8601 instant with a zone, e.g. 2026-12-01T09:00:00Z"), jobNotFound, AUTHENTICATED),
    },
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
    tags: ["Jobs"],
    summary: "Stream a job's archived runs (those retention moved out of its shard), oldest first",
    description:
      "Newline-delimited JSON, one run per line with its attempts, for runs scheduled in [from, to] (at most 31 days). Runs still in the shard are at /jobs/{id}/runs.",
    security,
    request: { params: IdParam, query: HistoryQuery },
    responses: {
      200: { content: { "application/x-ndjson": { schema: z.string() } }, description: "one Run (as GET /v1/runs/{id} shows it) per line" },
      ...errors(invalid("to", "the range may span at most 31 days; ask again for the next"), jobNotFound, noArchive, AUTHENTICATED),
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
