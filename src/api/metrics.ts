import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { schedulerMetrics } from "../app/metrics";
import { CostSchema } from "../model/cost";
import { parseDuration } from "../schedule/duration";
import type { AppEnv } from "./context";
import { AUTHENTICATED, invalid } from "./error-cases";
import { bearer, errors, json } from "./route-parts";
import { validationHook } from "./validation";

export const metrics = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const MAX_WINDOW_MS = 86_400_000;

/** The window the figures cover; GET /metrics takes the same. */
/** A window WindowQuery refuses, as /docs shows it. */
export const badWindow = invalid("window", "a duration such as 5m or 1h, at most 1d");

export const WindowQuery = z.object({
  window: z
    .string()
    .default("15m")
    .refine((w) => (parseDuration(w) ?? Infinity) <= MAX_WINDOW_MS, "a duration such as 5m or 1h, at most 1d")
    .openapi({ example: "15m" }),
});

const MetricsSchema = z
  .object({
    windowMs: z.int(),
    shards: z.int(),
    runsByState: z.record(z.string(), z.int()).openapi({ description: "All runs the shards hold, by state." }),
    attempts: z.object({
      byOutcome: z.record(z.string(), z.int()),
      failureRate: z.number().nullable().openapi({ description: "Failed or timed-out attempts over finished ones, in the window." }),
    }),
    fireLagMs: z
      .object({
        count: z.int(),
        p50: z.number().nullable(),
        p90: z.number().nullable(),
        p99: z.number().nullable(),
        max: z.number().nullable(),
      })
      .openapi({
        description: "Scheduled instant to first dispatch (its attempt's start), on the shard's clock, for runs started in the window.",
      }),
    outbox: z.int().openapi({ description: "Dispatches committed but not yet sent to the queue." }),
    awaitingClaim: z.int().openapi({
      description:
        "Runs dispatched and not yet reported by a consumer, their dispatch sent or still in the outbox (so they include `outbox`), or their target being called: the queue's depth as the shards see it. (The name is kept from when consumers claimed dispatches.)",
    }),
    oldestAwaitingClaimMs: z
      .int()
      .nullable()
      .openapi({ description: "How long the oldest of `awaitingClaim` has waited for its outcome." }),
    archive: z
      .object({
        failingShards: z
          .int()
          .openapi({ description: "Shards whose last write to the run archive (R2) failed: their expired runs stay until one succeeds." }),
        consecutiveFailures: z.int().openapi({
          description:
            "The most failed archive writes in a row of any shard; each shard waits longer after each (5 s, doubling, at most 10 min).",
        }),
        nextRetryAt: z.string().nullable().openapi({ description: "The earliest next try of a failing shard; null when none is failing." }),
      })
      .openapi({ description: "Retention's writes to the run archive, of whole shards (docs/operations.md, Retention and the archive)." }),
    cost: CostSchema.nullable().openapi({ description: "What the window cost (admin token only; null for a tenant key)." }),
  })
  .openapi("Metrics");

metrics.openapi(
  createRoute({
    method: "get",
    path: "/metrics",
    tags: ["Metrics"],
    summary: "Scheduler health: fire lag, backlog, failure rate (a tenant key sees its own runs only)",
    security: bearer,
    request: { query: WindowQuery },
    responses: {
      200: json(MetricsSchema, "aggregated over every shard in use"),
      ...errors(badWindow, AUTHENTICATED),
    },
  }),
  async (c) => {
    const windowMs = parseDuration(c.req.valid("query").window)!;
    return c.json(await schedulerMetrics(c.env, c.var.caller, windowMs), 200);
  },
);
