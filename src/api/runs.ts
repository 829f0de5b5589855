import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { completeRun, deadLetters, getRun, heartbeat, retryRun } from "../app/runs";
import { PageQuery, pageOf, Text } from "../model/common";
import { JOB_ID } from "../model/ids";
import { RunSchema } from "../model/run";
import type { AppEnv } from "./context";
import {
  AUTHENTICATED,
  badCursor,
  idTooLong,
  invalid,
  invalidToken,
  JSON_BODY,
  jobNotFound,
  notRetryable,
  runNotFound,
  staleAttempt,
} from "./error-cases";
import { presentRun } from "./present";
import { bearer, errors, json, jsonBody, pathId } from "./route-parts";
import { validationHook } from "./validation";

export const runs = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const IdParam = pathId("run_0mihx2k3f8a1b2c3d4e5_mj3k2a00");
const badId = idTooLong(200);

runs.openapi(
  createRoute({
    method: "get",
    path: "/runs/{id}",
    tags: ["Runs"],
    summary: "Get a run with all its attempts",
    security: bearer,
    request: { params: IdParam },
    responses: { 200: json(RunSchema, "the run"), ...errors(badId, runNotFound, AUTHENTICATED) },
  }),
  async (c) => c.json(presentRun(await getRun(c.env, c.var.caller, c.req.valid("param").id)), 200),
);

runs.openapi(
  createRoute({
    method: "post",
    path: "/runs/{id}/retry",
    tags: ["Runs"],
    summary: "Give a dead or failed run a fresh set of attempts",
    security: bearer,
    request: { params: IdParam },
    responses: {
      202: json(RunSchema, "the run, dispatched again (running), or waiting when flow control holds it"),
      ...errors(badId, runNotFound, notRetryable, AUTHENTICATED),
    },
  }),
  async (c) => c.json(presentRun(await retryRun(c.env, c.var.caller, c.req.valid("param").id)), 202),
);

// ---- long-running targets: authenticated by the completion token, not the API token ----

/** What a target receives in X-Edgecron-Completion-Token: its shard, the attempt's fence, a secret, a MAC over them. */
const TOKEN = "shard-7.3.k2j4h5g6f7d8s9a0q1w2e3r4.UNhY4JhezH9gQYqvDMWrWH9CwlcKiECVqejMrND2VFw";
const tokenTooLong = invalid("token", "Too big: expected string to have <=100 characters");

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

runs.openapi(
  createRoute({
    method: "post",
    path: "/runs/{id}/complete",
    tags: ["Runs"],
    summary: "Finish a long-running attempt (a target that answered 202)",
    description:
      "Authenticated by the attempt's completion token; no API token needed. A stale attempt's completion answers 409 and changes nothing.",
    request: {
      params: IdParam,
      body: jsonBody(CompleteBody, {
        succeeded: { summary: "The work succeeded", value: { token: TOKEN, ok: true, result: '{"rows":1200}' } },
        failed: {
          summary: "The work failed and another attempt may help",
          value: { token: TOKEN, ok: false, error: "upstream timed out" },
        },
        failedForGood: {
          summary: "The work failed and retrying cannot help: the run fails now",
          value: { token: TOKEN, ok: false, error: "the report no longer exists", retry: false },
        },
      }),
    },
    responses: {
      200: json(RunSchema, "the run, with the outcome recorded"),
      ...errors(tokenTooLong, JSON_BODY, invalidToken, staleAttempt),
    },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const { token, ...completion } = c.req.valid("json");
    return c.json(presentRun(await completeRun(c.env, id, token, completion)), 200);
  },
);

runs.openapi(
  createRoute({
    method: "post",
    path: "/runs/{id}/heartbeat",
    tags: ["Runs"],
    summary: "Extend a long-running attempt's lease",
    description:
      "Authenticated by the attempt's completion token. Without heartbeats, an accepted attempt times out after the job's timeoutMs.",
    request: {
      params: IdParam,
      body: jsonBody(HeartbeatBody, { extend: { summary: "Still working: two more minutes", value: { token: TOKEN, extendMs: 120_000 } } }),
    },
    responses: {
      200: json(z.object({ leaseUntil: z.string() }), "the new lease end"),
      ...errors(invalid("extendMs", "Too small: expected number to be >=1000"), JSON_BODY, invalidToken, staleAttempt),
    },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const { token, extendMs } = c.req.valid("json");
    const { leaseUntil } = await heartbeat(c.env, id, token, extendMs);
    return c.json({ leaseUntil: new Date(leaseUntil).toISOString() }, 200);
  },
);

// ---- dead letters ----

runs.openapi(
  createRoute({
    method: "get",
    path: "/dead-letters",
    tags: ["Runs"],
    summary: "Runs that ended without success: dead (retries exhausted) or failed (refused, or lost by the queue)",
    security: bearer,
    request: {
      query: PageQuery.extend({ jobId: z.string().regex(JOB_ID, "not a job id").optional().openapi({ description: "Only this job's." }) }),
    },
    responses: {
      200: json(pageOf(RunSchema), "a page of dead letters, newest first"),
      ...errors(invalid("jobId", "not a job id"), badCursor, jobNotFound, AUTHENTICATED),
    },
  }),
  async (c) => {
    const page = await deadLetters(c.env, c.var.caller, c.req.valid("query"));
    return c.json({ items: page.items.map(presentRun), nextCursor: page.nextCursor }, 200);
  },
);
