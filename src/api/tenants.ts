import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { type Caller, seesSealed } from "../app/caller";
import { changeTenant, createTenant, listTenants, loadTenant } from "../app/tenants";
import type { Tenant } from "../catalog/tenants";
import { pageOf, Text } from "../model/common";
import { NotifySchema } from "../model/job";
import { Reduced } from "../model/target";
import { viewNotify } from "../security/notify-urls";
import type { AppEnv } from "./context";
import { AUTHENTICATED, adminOnly, badCursor, idTooLong, invalid, JSON_BODY, tenantNotFound } from "./error-cases";
import { bearer, errors, json, jsonBody, tenantParam } from "./route-parts";
import { validationHook } from "./validation";

export const tenants = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const LimitsSchema = z
  .strictObject({
    maxJobs: z.int().min(1).max(1_000_000).nullable().optional().openapi({
      description:
        "Live jobs at once: not deleted, with an instant of their schedule to come (a one-off stops counting once its instant came, a schedule once its endAt passed); null: no limit.",
    }),
    maxRunsInFlight: z
      .int()
      .min(1)
      .max(100_000)
      .nullable()
      .optional()
      .openapi({ description: "Runs dispatched or running at once over all the tenant's jobs; the rest wait queued, none is lost." }),
    requestsPerSecond: z
      .int()
      .min(1)
      .max(10_000)
      .nullable()
      .optional()
      .openapi({ description: "API requests per second with its keys (429 above)." }),
    maxLiveMessages: z.int().min(1).max(1_000_000).nullable().optional().openapi({
      description:
        "QStash messages live at once (published, not yet delivered, dead or cancelled); a publish over it is a 429 that creates nothing; null: no limit.",
    }),
    retentionDays: z.int().min(1).max(3_650).nullable().optional().openapi({
      description: "Days finished runs stay in their shards before the archive; null: the default (7). A job's own retention wins.",
    }),
  })
  .openapi("TenantLimits");

const TenantSchema = z
  .object({
    id: z.string().openapi({ example: "ten_0123456789abcdefghij" }),
    name: z.string().nullable(),
    limits: z.object({
      maxJobs: z.int().nullable(),
      maxRunsInFlight: z.int().nullable(),
      requestsPerSecond: z.int().nullable(),
      maxLiveMessages: z.int().nullable(),
      retentionDays: z.int().nullable(),
    }),
    notify: z
      .object({ url: z.string(), on: z.array(z.string()), reduced: Reduced })
      .nullable()
      .openapi({ description: "Notifications for its jobs that name none of their own (see a job's `notify`); null: none." }),
    createdAt: z.string(),
  })
  .openapi("Tenant");

const badId = idTooLong(100);

/** A tenant as the API shows it: its notification URL (sealed at rest) opened, or to a `read` key reduced to its origin. */
const presentTenant = async (env: Env, caller: Caller, t: Tenant) => ({
  id: t.id,
  name: t.name,
  limits: t.limits,
  notify: t.notify && (await viewNotify(env.ENCRYPTION_KEYS, t.notify, t.id, seesSealed(caller))),
  createdAt: new Date(t.createdAt).toISOString(),
});

tenants.openapi(
  createRoute({
    method: "post",
    path: "/tenants",
    tags: ["Tenants"],
    summary: "Create a tenant and its first API key (admin only)",
    security: bearer,
    request: {
      body: jsonBody(
        z.strictObject({ name: Text(200).min(1).optional(), limits: LimitsSchema.optional(), notify: NotifySchema.optional() }),
        {
          limited: {
            summary: "A named tenant with its own limits and default notifications",
            value: {
              name: "acme",
              limits: { maxJobs: 500, maxRunsInFlight: 50, requestsPerSecond: 20, retentionDays: 30 },
              notify: { url: "https://example.com/hooks/edgecron", on: ["dead", "paused"] },
            },
          },
          defaults: { summary: "A tenant with the default limits", value: {} },
        },
        false,
      ),
    },
    responses: {
      201: json(TenantSchema.extend({ apiKey: z.string(), keyId: z.string() }), "the tenant; its API key is shown this once"),
      ...errors(invalid("limits.maxJobs", "Too small: expected number to be >=1"), JSON_BODY, adminOnly, AUTHENTICATED),
    },
  }),
  async (c) => {
    const { tenant, key } = await createTenant(c.env, c.var.caller, c.req.valid("json") ?? {});
    return c.json({ ...(await presentTenant(c.env, c.var.caller, tenant)), apiKey: key.apiKey, keyId: key.id }, 201);
  },
);

tenants.openapi(
  createRoute({
    method: "get",
    path: "/tenants",
    tags: ["Tenants"],
    summary: "List tenants (admin only)",
    security: bearer,
    request: { query: z.object({ limit: z.coerce.number().int().min(1).max(200).default(50), cursor: z.string().max(100).optional() }) },
    responses: {
      200: json(pageOf(TenantSchema), "a page of tenants"),
      ...errors(invalid("limit", "Too big: expected number to be <=200"), badCursor, adminOnly, AUTHENTICATED),
    },
  }),
  async (c) => {
    const page = await listTenants(c.env, c.var.caller, c.req.valid("query"));
    const items = await Promise.all(page.items.map((t) => presentTenant(c.env, c.var.caller, t)));
    return c.json({ items, nextCursor: page.nextCursor }, 200);
  },
);

tenants.openapi(
  createRoute({
    method: "get",
    path: "/tenants/{id}",
    tags: ["Tenants"],
    summary: "Get a tenant (the admin, or the tenant itself)",
    security: bearer,
    request: { params: tenantParam },
    responses: { 200: json(TenantSchema, "the tenant"), ...errors(badId, tenantNotFound, AUTHENTICATED) },
  }),
  async (c) => c.json(await presentTenant(c.env, c.var.caller, await loadTenant(c.env, c.var.caller, c.req.valid("param").id)), 200),
);

tenants.openapi(
  createRoute({
    method: "patch",
    path: "/tenants/{id}",
    tags: ["Tenants"],
    summary: "Change a tenant's limits (admin only) or its default notifications (the admin, or the tenant itself)",
    security: bearer,
    request: {
      params: tenantParam,
      body: jsonBody(
        z
          .strictObject({ limits: LimitsSchema.optional(), notify: NotifySchema.nullable().optional() })
          .refine((b) => b.limits !== undefined || b.notify !== undefined, "give limits or notify"),
        {
          limits: {
            summary: "Raise the job quota, lift the request rate limit (admin only)",
            value: { limits: { maxJobs: 2_000, requestsPerSecond: null } },
          },
          notify: {
            summary: "Be told of dead runs only (the admin, or the tenant itself)",
            value: { notify: { url: "https://example.com/hooks/edgecron", on: ["dead"] } },
          },
          noNotify: { summary: "Stop the default notifications", value: { notify: null } },
        },
      ),
    },
    responses: {
      200: json(TenantSchema, "the tenant"),
      ...errors(invalid("(body)", "give limits or notify"), JSON_BODY, adminOnly, badId, tenantNotFound, AUTHENTICATED),
    },
  }),
  async (c) =>
    c.json(
      await presentTenant(c.env, c.var.caller, await changeTenant(c.env, c.var.caller, c.req.valid("param").id, c.req.valid("json"))),
      200,
    ),
);
