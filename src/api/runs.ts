import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { type CatalogJob, shardsInUse } from "../catalog/jobs";
import { PageQuery, pageOf, Text } from "../model/common";
import { JOB_ID, jobIdOfRun, parseCompletionToken } from "../model/ids";
import { RunSchema } from "../model/run";
import type { RunView, TokenRefusal } from "../shard/contract";
import { shardStub } from "../stubs";
import { type AppContext, type AppEnv, scopeOf } from "./context";
import { ApiError, notFound } from "./errors";
import { loadJob } from "./jobs";
import { presentRun } from "./present";
import { bearer, errors, json, pathId } from "./route-parts";
import { validationHook } from "./validation";

export const runs = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const IdParam = pathId("run_0mihx2k3f8a1b2c3d4e5_mj3k2a00");

/** The job a run belongs to (deleted jobs included: their runs stay readable), or 404. */
async function jobOfRun(c: AppContext, runId: string): Promise<CatalogJob> {
  const jobId = jobIdOfRun(runId);
  if (!jobId) throw notFound("run", runId);
  return loadJob(c, jobId, { includeDeleted: true }).catch((err: unknown) => {
    // Only "no such job" becomes "no such run"; anything else (D1 down: 503) stays what it is.
    throw err instanceof ApiError && err.status === 404 ? notFound("run", runId) : err;
  });
}

runs.openapi(
  createRoute({
    method: "get",
    path: "/runs/{id}",
    summary: "Get a run with all its attempts",
    security: bearer,
    request: { params: IdParam },
    responses: { 200: json(RunSchema, "the run"), ...errors(404) },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const job = await jobOfRun(c, id);
    const run = await shardStub(c.env, job.shard).getRun(id);
    if (!run) throw notFound("run", id);
    return c.json(presentRun(run), 200);
  },
);

runs.openapi(
  createRoute({
    method: "post",
    path: "/runs/{id}/retry",
    summary: "Give a dead or failed run a fresh set of attempts",
    security: bearer,
    request: { params: IdParam },
    responses: { 202: json(RunSchema, "the run, queued again"), ...errors(404, 409) },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const job = await jobOfRun(c, id);
    const answer = await shardStub(c.env, job.shard).retryRun(id);
    if (!answer.ok) {
      if (answer.refusal === "unknown_run") throw notFound("run", id);
      throw new ApiError(409, "not_retryable", "only a dead or failed run of a live (not paused, not deleted) job can be retried");
    }
    return c.json(presentRun(answer.value), 202);
  },
);

// ---- long-running targets: authenticated by the completion token, not the API token ----

const TokenBody = { token: z.string().max(100).openapi({ description: "The X-Edgecron-Completion-Token the attempt received." }) };

const CompleteBody = z
  .strictObject({
    ...TokenBody,
    ok: z.boolean(),
    result: Text(65_536).optional().openapi({ description: "Kept on the run (at most 64 KiB)." }),
    error: Text(2_000).optional(),
    retry: z.boolean().default(true).openapi({ description: "For a failure: may another attempt help? false fails the run at once." }),
  })
  .openapi("Completion");

const HeartbeatBody = z
  .strictObject({
    ...TokenBody,
    extendMs: z.int().min(1_000).max(3_600_000).default(60_000).openapi({ description: "The lease runs this long from now." }),
  })
  .openapi("Heartbeat");

function shardOfToken(token: string): string {
  const parsed = parseCompletionToken(token);
  if (!parsed) throw new ApiError(403, "invalid_token", "not a completion token edgecron issued");
  return parsed.shard;
}

/**
 * Completion-token verdicts as HTTP answers. An unknown run gets the same answer as a wrong
 * token: these routes take no API key, so a difference would tell anyone which runs exist.
 */
function tokenError(verdict: TokenRefusal): ApiError {
  if (verdict === "unknown_run" || verdict === "invalid_token")
    return new ApiError(403, "invalid_token", "this completion token does not belong to this run");
  return new ApiError(409, "stale", "this attempt is no longer current (it timed out, or the run ended); nothing was changed");
}

runs.openapi(
  createRoute({
    method: "post",
    path: "/runs/{id}/complete",
    summary: "Finish a long-running attempt (a target that answered 202)",
    description:
      "Authenticated by the attempt's completion token; no API token needed. A stale attempt's completion answers 409 and changes nothing.",
    request: { params: IdParam, body: { content: { "application/json": { schema: CompleteBody } }, required: true } },
    responses: { 200: json(RunSchema, "the run, with the outcome recorded"), ...errors(400, 403, 404, 409) },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const { token, ...completion } = c.req.valid("json");
    const answer = await shardStub(c.env, shardOfToken(token)).complete(id, token, completion);
    if (!answer.ok) throw tokenError(answer.refusal);
    return c.json(presentRun(answer.value), 200);
  },
);

runs.openapi(
  createRoute({
    method: "post",
    path: "/runs/{id}/heartbeat",
    summary: "Extend a long-running attempt's lease",
    description:
      "Authenticated by the attempt's completion token. Without heartbeats, an accepted attempt times out after the job's timeoutMs.",
    request: { params: IdParam, body: { content: { "application/json": { schema: HeartbeatBody } }, required: true } },
    responses: { 200: json(z.object({ leaseUntil: z.string() }), "the new lease end"), ...errors(400, 403, 404, 409) },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const { token, extendMs } = c.req.valid("json");
    const answer = await shardStub(c.env, shardOfToken(token)).heartbeat(id, token, extendMs);
    if (!answer.ok) throw tokenError(answer.refusal);
    return c.json({ leaseUntil: new Date(answer.value.leaseUntil).toISOString() }, 200);
  },
);

// ---- dead letters ----

/** Dead letters page by (finishedAt, id), newest first, across shards; the cursor carries both. */
const DEAD_CURSOR = /^([0-9a-z]{1,12})\.(run_[0-9A-Za-z_-]{1,120})$/;

runs.openapi(
  createRoute({
    method: "get",
    path: "/dead-letters",
    summary: "Runs that ended without success: dead (retries exhausted) or failed (refused, or lost by the queue)",
    security: bearer,
    request: {
      query: PageQuery.extend({ jobId: z.string().regex(JOB_ID, "not a job id").optional().openapi({ description: "Only this job's." }) }),
    },
    responses: { 200: json(pageOf(RunSchema), "a page of dead letters, newest first"), ...errors(400, 404) },
  }),
  async (c) => {
    const { limit, cursor, jobId } = c.req.valid("query");
    let before: { finishedAt: number; id: string } | undefined;
    if (cursor !== undefined) {
      const match = DEAD_CURSOR.exec(cursor);
      if (!match) throw new ApiError(400, "invalid_request", "cursor: not a cursor this API returned");
      before = { finishedAt: parseInt(match[1]!, 36), id: match[2]! };
    }
    const tenantId = scopeOf(c);
    const shards = jobId ? [(await loadJob(c, jobId, { includeDeleted: true })).shard] : await shardsInUse(c.env.DB, tenantId);
    // Each shard returns its newest `limit + 1`; merged, the newest `limit + 1` overall are among them.
    const scope = { tenantId, jobId: jobId ?? null };
    const pages = await Promise.all(shards.map((s) => shardStub(c.env, s).deadLetters(scope, limit + 1, before)));
    const merged = pages.flat().sort(newestFailureFirst);
    const page = merged.slice(0, limit);
    const last = page.at(-1);
    return c.json(
      {
        items: page.map(presentRun),
        nextCursor: merged.length > limit && last ? `${last.finishedAt!.toString(36)}.${last.id}` : null,
      },
      200,
    );
  },
);

function newestFailureFirst(a: RunView, b: RunView): number {
  return b.finishedAt! - a.finishedAt! || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
}
