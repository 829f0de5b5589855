import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { shardsInUse } from "../catalog/jobs";
import {
  type ApiKeyRow,
  getTenant,
  hashKey,
  insertKey,
  insertTenant,
  listKeys,
  listTenants,
  revokeKey,
  settingsOf,
  type Tenant,
  updateTenant,
} from "../catalog/tenants";
import { Misconfigured } from "../config";
import { pageOf, Text } from "../model/common";
import { DEFAULT_TENANT, KEY_ID, newApiKey, newKeyId, newTenantId, TENANT_ID } from "../model/ids";
import { SIGNATURE_HEADER, signingSecrets } from "../security/signing";
import { shardStub } from "../stubs";
import { type AppContext, type AppEnv, ownsTenant, scopeOf } from "./context";
import { ApiError, notFound } from "./errors";
import { bearer, errors, json } from "./route-parts";
import { validationHook } from "./validation";

export const tenants = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const LimitsSchema = z
  .strictObject({
    maxJobs: z.int().min(1).max(1_000_000).nullable().optional().openapi({ description: "Live jobs at once; null: no limit." }),
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
  })
  .openapi("TenantLimits");

/** A new tenant's limits unless given: generous, but a runaway client cannot take the whole system. */
const DEFAULT_LIMITS = { maxJobs: 10_000, maxRunsInFlight: 1_000, requestsPerSecond: 100 };

const TenantSchema = z
  .object({
    id: z.string().openapi({ example: "ten_0123456789abcdefghij" }),
    name: z.string().nullable(),
    limits: z.object({ maxJobs: z.int().nullable(), maxRunsInFlight: z.int().nullable(), requestsPerSecond: z.int().nullable() }),
    createdAt: z.string(),
  })
  .openapi("Tenant");

const KeySchema = z
  .object({
    id: z.string().openapi({ example: "key_0123456789abcdefghij" }),
    prefix: z.string().openapi({ description: "The key's first characters, to recognise it." }),
    createdAt: z.string(),
    revokedAt: z.string().nullable(),
  })
  .openapi("ApiKey");

const NewKeySchema = KeySchema.extend({
  apiKey: z.string().openapi({ description: "Shown once: only its hash is stored." }),
}).openapi("NewApiKey");

const TenantParam = z.object({
  id: z
    .string()
    .max(100)
    .openapi({ param: { name: "id", in: "path" }, example: "ten_0123456789abcdefghij" }),
});

const presentTenant = (t: Tenant) => ({ id: t.id, name: t.name, limits: t.limits, createdAt: new Date(t.createdAt).toISOString() });
const presentKey = (k: ApiKeyRow) => ({
  id: k.id,
  prefix: k.prefix,
  createdAt: new Date(k.createdAt).toISOString(),
  revokedAt: k.revokedAt === null ? null : new Date(k.revokedAt).toISOString(),
});

function requireAdmin(c: AppContext): void {
  if (!c.var.caller.admin) throw new ApiError(403, "forbidden", "only the admin token may do this");
}

/** A tenant the caller may see (itself, or any for the admin), or 404 exactly as for an unknown id. */
async function loadTenant(c: AppContext, id: string): Promise<Tenant> {
  const tenant = TENANT_ID.test(id) && ownsTenant(c, id) ? await getTenant(c.env.DB, id) : null;
  if (!tenant) throw notFound("tenant", id);
  return tenant;
}

async function mintKey(): Promise<{ id: string; apiKey: string; hash: string; prefix: string }> {
  const apiKey = newApiKey();
  return { id: newKeyId(), apiKey, hash: await hashKey(apiKey), prefix: apiKey.slice(0, 7) };
}

/**
 * Hands a tenant's new settings to every shard holding its jobs. A shard that cannot be
 * reached now gets them from the next sweep; signatures stay verifiable meanwhile, because
 * every request is signed with the current and the next secret.
 */
async function pushSettings(c: AppContext, tenant: Tenant): Promise<void> {
  const shards = await shardsInUse(c.env.DB, tenant.id);
  const results = await Promise.allSettled(shards.map((s) => shardStub(c.env, s).applyTenants([settingsOf(tenant)])));
  const failed = results.filter((r) => r.status === "rejected").length;
  if (failed > 0) console.error(`tenant ${tenant.id}: ${failed} of ${shards.length} shards did not take its new settings; the sweep will`);
}

// ---- tenants ----

tenants.openapi(
  createRoute({
    method: "post",
    path: "/tenants",
    summary: "Create a tenant and its first API key (admin only)",
    security: bearer,
    request: {
      body: {
        content: { "application/json": { schema: z.strictObject({ name: Text(200).min(1).optional(), limits: LimitsSchema.optional() }) } },
        required: false,
      },
    },
    responses: {
      201: json(TenantSchema.extend({ apiKey: z.string(), keyId: z.string() }), "the tenant; its API key is shown this once"),
      ...errors(400, 403),
    },
  }),
  async (c) => {
    requireAdmin(c);
    const body = c.req.valid("json") ?? {};
    const now = Date.now();
    const tenant: Tenant = {
      id: newTenantId(),
      name: body.name ?? null,
      limits: { ...DEFAULT_LIMITS, ...body.limits },
      signingGeneration: 1,
      version: 1,
      createdAt: now,
    };
    const key = await mintKey();
    await insertTenant(c.env.DB, tenant, key);
    return c.json({ ...presentTenant(tenant), apiKey: key.apiKey, keyId: key.id }, 201);
  },
);

tenants.openapi(
  createRoute({
    method: "get",
    path: "/tenants",
    summary: "List tenants (admin only)",
    security: bearer,
    request: { query: z.object({ limit: z.coerce.number().int().min(1).max(200).default(50), cursor: z.string().max(100).optional() }) },
    responses: { 200: json(pageOf(TenantSchema), "a page of tenants"), ...errors(400, 403) },
  }),
  async (c) => {
    requireAdmin(c);
    const { limit, cursor } = c.req.valid("query");
    if (cursor !== undefined && !TENANT_ID.test(cursor))
      throw new ApiError(400, "invalid_request", "cursor: not a cursor this API returned");
    const rows = await listTenants(c.env.DB, limit + 1, cursor);
    const page = rows.slice(0, limit);
    return c.json({ items: page.map(presentTenant), nextCursor: rows.length > limit ? page.at(-1)!.id : null }, 200);
  },
);

tenants.openapi(
  createRoute({
    method: "get",
    path: "/tenants/{id}",
    summary: "Get a tenant (the admin, or the tenant itself)",
    security: bearer,
    request: { params: TenantParam },
    responses: { 200: json(TenantSchema, "the tenant"), ...errors(404) },
  }),
  async (c) => c.json(presentTenant(await loadTenant(c, c.req.valid("param").id)), 200),
);

tenants.openapi(
  createRoute({
    method: "patch",
    path: "/tenants/{id}",
    summary: "Change a tenant's limits (admin only)",
    security: bearer,
    request: {
      params: TenantParam,
      body: { content: { "application/json": { schema: z.strictObject({ limits: LimitsSchema }) } }, required: true },
    },
    responses: { 200: json(TenantSchema, "the tenant"), ...errors(400, 403, 404) },
  }),
  async (c) => {
    requireAdmin(c);
    const { id } = c.req.valid("param");
    await loadTenant(c, id);
    const tenant = await updateTenant(c.env.DB, id, { limits: c.req.valid("json").limits });
    if (!tenant) throw notFound("tenant", id);
    await pushSettings(c, tenant);
    return c.json(presentTenant(tenant), 200);
  },
);

// ---- API keys: add one, move clients over, revoke the old one ----

tenants.openapi(
  createRoute({
    method: "post",
    path: "/tenants/{id}/keys",
    summary: "Add an API key (the admin, or the tenant itself)",
    security: bearer,
    request: { params: TenantParam },
    responses: { 201: json(NewKeySchema, "the key; shown this once"), ...errors(404) },
  }),
  async (c) => {
    const tenant = await loadTenant(c, c.req.valid("param").id);
    const key = await mintKey();
    const now = Date.now();
    await insertKey(c.env.DB, tenant.id, key, now);
    return c.json({ ...presentKey({ ...key, tenantId: tenant.id, createdAt: now, revokedAt: null }), apiKey: key.apiKey }, 201);
  },
);

tenants.openapi(
  createRoute({
    method: "get",
    path: "/tenants/{id}/keys",
    summary: "List a tenant's API keys, revoked ones included (never the keys themselves)",
    security: bearer,
    request: { params: TenantParam },
    responses: { 200: json(z.object({ items: z.array(KeySchema) }), "the keys"), ...errors(404) },
  }),
  async (c) => {
    const tenant = await loadTenant(c, c.req.valid("param").id);
    return c.json({ items: (await listKeys(c.env.DB, tenant.id)).map(presentKey) }, 200);
  },
);

tenants.openapi(
  createRoute({
    method: "delete",
    path: "/tenants/{id}/keys/{keyId}",
    summary: "Revoke an API key: it stops working at once",
    description: "A tenant may not revoke its own last live key (it would lock itself out); the admin may.",
    security: bearer,
    request: {
      params: TenantParam.extend({
        keyId: z
          .string()
          .max(100)
          .openapi({ param: { name: "keyId", in: "path" } }),
      }),
    },
    responses: { 200: json(z.object({ id: z.string(), revoked: z.literal(true) }), "revoked"), ...errors(404, 409) },
  }),
  async (c) => {
    const { id, keyId } = c.req.valid("param");
    const tenant = await loadTenant(c, id);
    const answer = KEY_ID.test(keyId) ? await revokeKey(c.env.DB, tenant.id, keyId, Date.now(), !c.var.caller.admin) : null;
    if (answer === null) throw notFound("key", keyId);
    if (answer === "last_key") throw new ApiError(409, "last_key", "this is the tenant's last live key: add another before revoking it");
    return c.json({ id: keyId, revoked: true as const }, 200);
  },
);

// ---- signing secrets ----

const SigningKeysSchema = z
  .object({
    tenantId: z.string(),
    header: z.string().openapi({ example: SIGNATURE_HEADER }),
    current: z.string().openapi({ description: "Requests are signed with this secret…" }),
    next: z.string().openapi({ description: "…and with this one, which becomes current at the next rotation." }),
  })
  .openapi("SigningKeys");

const TenantQuery = z.object({
  tenantId: z.string().max(100).optional().openapi({ description: "Admin only: whose keys (default: the admin's own tenant, `default`)." }),
});

/** The tenant a signing-keys call is about: the caller's own, or for the admin the one named. */
async function signingTenant(c: AppContext, named: string | undefined): Promise<Tenant> {
  const own = scopeOf(c);
  if (own !== null && named !== undefined && named !== own) throw notFound("tenant", named);
  return loadTenant(c, own ?? named ?? DEFAULT_TENANT);
}

async function presentSigning(c: AppContext, tenant: Tenant) {
  const { current, next } = await signingSecrets(c.env.SIGNING_SECRET, tenant.id, tenant.signingGeneration).catch((err: Error) => {
    throw new Misconfigured(err.message);
  });
  return { tenantId: tenant.id, header: SIGNATURE_HEADER, current, next };
}

tenants.openapi(
  createRoute({
    method: "get",
    path: "/signing-keys",
    summary: "The secrets targets verify Edgecron-Signature with",
    security: bearer,
    request: { query: TenantQuery },
    responses: { 200: json(SigningKeysSchema, "the current and next secret"), ...errors(404) },
  }),
  async (c) => c.json(await presentSigning(c, await signingTenant(c, c.req.valid("query").tenantId)), 200),
);

tenants.openapi(
  createRoute({
    method: "post",
    path: "/signing-keys/rotate",
    summary: "Rotate: next becomes current, a new next appears, the old current stops being used",
    description:
      "Give targets the new `next` before the following rotation. Requests in flight keep verifying: each is signed with current and next.",
    security: bearer,
    request: { query: TenantQuery },
    responses: { 200: json(SigningKeysSchema, "the secrets after rotation"), ...errors(404) },
  }),
  async (c) => {
    const before = await signingTenant(c, c.req.valid("query").tenantId);
    const tenant = await updateTenant(c.env.DB, before.id, { rotateSigning: true });
    if (!tenant) throw notFound("tenant", before.id);
    await pushSettings(c, tenant);
    return c.json(await presentSigning(c, tenant), 200);
  },
);
