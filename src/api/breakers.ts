import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { listBreakers } from "../app/breakers";
import type { AppEnv } from "./context";
import { AUTHENTICATED, invalid, tenantNotFound } from "./error-cases";
import { bearer, errors, json } from "./route-parts";
import { validationHook } from "./validation";

/** The tenant's circuit breakers, one per target origin (src/gate/breaker.ts). */
export const breakers = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

const BreakerSchema = z
  .object({
    origin: z.string().openapi({ example: "https://api.example.com" }),
    state: z.enum(["closed", "open", "half_open"]).openapi({
      description:
        "closed: calls go through (listed while it counts failures); open: runs for the origin wait; half_open: one probe run is out.",
    }),
    consecutiveFailures: z.int(),
    openedAt: z.string().nullable(),
    retryAt: z.string().nullable().openapi({ description: "Open: when a probe may go. Half-open: when the probe out counts as lost." }),
    cooldownMs: z.int().openapi({ description: "How long it stays open; doubles each time a probe fails, at most 30 minutes." }),
    heldRuns: z.int().openapi({ description: "Runs held (waiting, their attempts unspent) since it last opened." }),
  })
  .openapi("Breaker");

const BreakersSchema = z.object({ tenantId: z.string(), items: z.array(BreakerSchema) }).openapi("Breakers");

breakers.openapi(
  createRoute({
    method: "get",
    path: "/breakers",
    tags: ["Breakers"],
    summary: "The tenant's circuit breakers that are open, half-open or counting failures",
    description:
      "One per target origin: after 5 failures in a row that say the origin is down (no answer, 502, 503, 504, 429, 520–526, 530; not a 500 or a 4xx), within 10 minutes, from more than one job (at most 3 of one job or step counted), it opens, and runs for that origin wait instead of spending attempts; after a cooldown one probe goes, taken in turn among the held jobs; any job's answer saying the origin is up closes the breaker. A run held while the origin has been down over 24 hours ends dead, uncalled. A job opts out with `breaker: false`.",
    security: bearer,
    request: {
      query: z.object({
        tenantId: z
          .string()
          .max(100)
          .optional()
          .openapi({ description: "Admin only: whose breakers (default: the admin's own tenant, `default`)." }),
      }),
    },
    responses: {
      200: json(BreakersSchema, "the breakers"),
      ...errors(invalid("tenantId", "Too big: expected string to have <=100 characters"), tenantNotFound, AUTHENTICATED),
    },
  }),
  async (c) => {
    const { tenantId, breakers: list } = await listBreakers(c.env, c.var.caller, c.req.valid("query").tenantId);
    return c.json(
      {
        tenantId,
        items: list.map((b) => ({
          origin: b.origin,
          state: b.state,
          consecutiveFailures: b.failures,
          openedAt: iso(b.openedAt),
          retryAt: iso(b.retryAt),
          cooldownMs: b.cooldownMs,
          heldRuns: b.held,
        })),
      },
      200,
    );
  },
);
