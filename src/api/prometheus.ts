import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { schedulerExposition } from "../app/metrics";
import { EXPOSITION_CONTENT_TYPE } from "../app/prometheus";
import { parseDuration } from "../schedule/duration";
import type { AppEnv } from "./context";
import { AUTHENTICATED } from "./error-cases";
import { badWindow, WindowQuery } from "./metrics";
import { bearer, errors } from "./route-parts";
import { validationHook } from "./validation";

/** GET /metrics: the scheduler's health for a Prometheus scrape (src/app/prometheus-series.ts says what is in it). */
export const prometheus = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

prometheus.openapi(
  createRoute({
    method: "get",
    path: "/metrics",
    tags: ["Metrics"],
    summary: "Scheduler health in Prometheus's text format (a tenant key sees its own runs only)",
    description:
      "The figures of GET /v1/metrics as Prometheus series named edgecron_*: gauges of the last `window`, and the tenant's breaker transitions as a counter. The admin token also gets the shards' counters and cumulative histograms since each shard was created (runs finished, attempts, fire and alarm lag, dispatches, retries, dead letters, shard starts: for rate()), the outbox, the window's calls, cost, shard starts and alarm lag, and the sweep's progress and last invocation. docs/metrics.md lists them.",
    security: bearer,
    request: { query: WindowQuery },
    responses: {
      200: {
        content: { [EXPOSITION_CONTENT_TYPE]: { schema: z.string().openapi({ example: "edgecron_queue_depth 0\n" }) } },
        description: "text exposition format 0.0.4",
      },
      ...errors(badWindow, AUTHENTICATED),
    },
  }),
  async (c) => {
    const windowMs = parseDuration(c.req.valid("query").window)!;
    const text = await schedulerExposition(c.env, c.var.caller, windowMs);
    return c.text(text, 200, { "Content-Type": EXPOSITION_CONTENT_TYPE });
  },
);
