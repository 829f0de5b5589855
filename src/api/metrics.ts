import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { shardsInUse } from "../catalog/jobs";
import { ErrorSchema } from "../model/common";
import { parseDuration } from "../schedule/duration";
import type { ShardMetrics } from "../shard/contract";
import { shardStub } from "../stubs";
import { type AppEnv, scopeOf } from "./context";
import { validationHook } from "./validation";

export const metrics = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const MAX_WINDOW_MS = 86_400_000;

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
      .openapi({ description: "Scheduled instant to first claim, on the shard's clock, for runs started in the window." }),
    outbox: z.int().openapi({ description: "Dispatches written but not yet sent to the queue." }),
    awaitingClaim: z
      .int()
      .openapi({ description: "Runs sent to the queue and not yet claimed by a consumer: the queue's depth as the shards see it." }),
    oldestAwaitingClaimMs: z.int().nullable(),
  })
  .openapi("Metrics");

export function percentile(sorted: number[], p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

metrics.openapi(
  createRoute({
    method: "get",
    path: "/metrics",
    summary: "Scheduler health: fire lag, backlog, failure rate (a tenant key sees its own runs only)",
    security: [{ bearer: [] }],
    request: {
      query: z.object({
        window: z
          .string()
          .default("15m")
          .refine((w) => (parseDuration(w) ?? Infinity) <= MAX_WINDOW_MS, "a duration such as 5m or 1h, at most 1d")
          .openapi({ example: "15m" }),
      }),
    },
    responses: {
      200: { content: { "application/json": { schema: MetricsSchema } }, description: "aggregated over every shard in use" },
      400: { content: { "application/json": { schema: ErrorSchema } }, description: "bad window" },
    },
  }),
  async (c) => {
    const windowMs = parseDuration(c.req.valid("query").window)!;
    const tenantId = scopeOf(c);
    const shards = await shardsInUse(c.env.DB, tenantId);
    const all: ShardMetrics[] = await Promise.all(shards.map((s) => shardStub(c.env, s).metrics(windowMs, tenantId)));
    const sum = (pick: (m: ShardMetrics) => Record<string, number>) => {
      const total: Record<string, number> = {};
      for (const m of all) for (const [k, v] of Object.entries(pick(m))) total[k] = (total[k] ?? 0) + v;
      return total;
    };
    const byOutcome = sum((m) => m.attemptsByOutcome);
    const finished = (byOutcome.succeeded ?? 0) + (byOutcome.failed ?? 0) + (byOutcome.timed_out ?? 0);
    const lags = all.flatMap((m) => m.lagsMs).sort((a, b) => a - b);
    const oldest = all.map((m) => m.oldestAwaitingClaimMs).filter((x): x is number => x !== null);
    return c.json(
      {
        windowMs,
        shards: shards.length,
        runsByState: sum((m) => m.runsByState),
        attempts: { byOutcome, failureRate: finished === 0 ? null : ((byOutcome.failed ?? 0) + (byOutcome.timed_out ?? 0)) / finished },
        fireLagMs: {
          count: lags.length,
          p50: percentile(lags, 50),
          p90: percentile(lags, 90),
          p99: percentile(lags, 99),
          max: lags.at(-1) ?? null,
        },
        outbox: all.reduce((n, m) => n + m.outbox, 0),
        awaitingClaim: all.reduce((n, m) => n + m.awaitingClaim, 0),
        oldestAwaitingClaimMs: oldest.length ? Math.max(...oldest) : null,
      },
      200,
    );
  },
);
