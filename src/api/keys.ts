import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { addKey, listKeys, revokeKey } from "../app/keys";
import type { ApiKeyRow } from "../catalog/tenants";
import { JobPrefixSchema, ScopeSchema } from "../model/scopes";
import type { AppEnv } from "./context";
import { AUTHENTICATED, idTooLong, invalid, JSON_BODY, keyLineConflict, keyNotFound, lastKey, tenantNotFound } from "./error-cases";
import { bearer, errors, json, jsonBody, tenantParam } from "./route-parts";
import { validationHook } from "./validation";

/** API keys: add one, move clients over, revoke the old one. */
export const keys = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const KeySchema = z
  .object({
    id: z.string().openapi({ example: "key_0123456789abcdefghij" }),
    prefix: z.string().openapi({ description: "The key's first characters, to recognise it." }),
    scopes: z.array(ScopeSchema).openapi({ description: "read, write, admin: each includes the ones before it (docs/security.md)." }),
    jobPrefix: z.string().nullable().openapi({ description: "Only jobs whose name starts with this; null: every job of the tenant." }),
    createdAt: z.string(),
    revokedAt: z.string().nullable(),
    createdBy: z.string().nullable().openapi({
      description:
        "The key that made this one (revoking it revokes this one too, unless this one or a key it made revokes it); null: the admin token, or the tenant's creation.",
      example: null,
    }),
  })
  .openapi("ApiKey");

const NewKeySchema = KeySchema.extend({
  apiKey: z.string().openapi({ description: "Shown once: only its hash is stored." }),
}).openapi("NewApiKey");

const badId = idTooLong(100);

const NewKeyBody = z.strictObject({
  scopes: z
    .array(ScopeSchema)
    .min(1)
    .max(3)
    .optional()
    .openapi({ description: 'What the key may do; default `["read"]`, the narrowest. No more than the caller\'s own.' }),
  jobPrefix: JobPrefixSchema.nullable()
    .optional()
    .openapi({ description: "Limit the key to jobs whose name starts with this (and to routes about single jobs)." }),
});

const presentKey = (k: ApiKeyRow) => ({
  id: k.id,
  prefix: k.prefix,
  scopes: [...k.scopes],
  jobPrefix: k.jobPrefix,
  createdAt: new Date(k.createdAt).toISOString(),
  revokedAt: k.revokedAt === null ? null : new Date(k.revokedAt).toISOString(),
  createdBy: k.createdBy,
});

keys.openapi(
  createRoute({
    method: "post",
    path: "/tenants/{id}/keys",
    tags: ["API keys"],
    summary: "Add an API key (the admin token, or a key of the tenant with the admin scope)",
    description: "The key may do only what `scopes` (default: read) and `jobPrefix` allow, and never more than the key that makes it.",
    security: bearer,
    request: {
      params: tenantParam,
      body: jsonBody(
        NewKeyBody,
        {
          dashboard: { summary: "A read-only key, for a dashboard (the default)", value: { scopes: ["read"] } },
          deploys: { summary: "A key that changes only the jobs named deploy-…", value: { scopes: ["write"], jobPrefix: "deploy-" } },
        },
        false,
      ),
    },
    responses: {
      201: json(NewKeySchema, "the key; shown this once"),
      ...errors(
        invalid("scopes.0", 'Invalid option: expected one of "read"|"write"|"admin"'),
        JSON_BODY,
        badId,
        tenantNotFound,
        AUTHENTICATED,
      ),
    },
  }),
  async (c) => {
    const { row, key } = await addKey(c.env, c.var.caller, c.req.valid("param").id, c.req.valid("json") ?? {});
    return c.json({ ...presentKey(row), apiKey: key.apiKey }, 201);
  },
);

keys.openapi(
  createRoute({
    method: "get",
    path: "/tenants/{id}/keys",
    tags: ["API keys"],
    summary: "List a tenant's API keys, revoked ones included (never the keys themselves)",
    security: bearer,
    request: { params: tenantParam },
    responses: { 200: json(z.object({ items: z.array(KeySchema) }), "the keys"), ...errors(badId, tenantNotFound, AUTHENTICATED) },
  }),
  async (c) => c.json({ items: (await listKeys(c.env, c.var.caller, c.req.valid("param").id)).map(presentKey) }, 200),
);

keys.openapi(
  createRoute({
    method: "delete",
    path: "/tenants/{id}/keys/{keyId}",
    tags: ["API keys"],
    summary: "Revoke an API key, and the keys it made (not the caller's own): they stop working within 5 seconds",
    description:
      "Every live key the key made, and the keys those made, are revoked with it, in the same transaction (`alsoRevoked`), except the calling key and the keys it made, transitively: a key that revokes a key that made it (rotation: the old key made the new one, the new one revokes the old) stays live, and so do its own keys. A key revoking itself takes every key it made with it. The admin token spares nothing. A tenant's key may not leave the tenant without a live key (it would lock it out), counting those; the admin token may. The keys revoked are refused at once where the revocation was made, and within 5 seconds everywhere: a Worker isolate trusts a key it found live for that long.",
    security: bearer,
    request: {
      params: tenantParam.extend({
        keyId: z
          .string()
          .max(100)
          .openapi({ param: { name: "keyId", in: "path" }, example: "key_0123456789abcdefghij" }),
      }),
    },
    responses: {
      200: json(
        z.object({
          id: z.string(),
          revoked: z.literal(true),
          alsoRevoked: z.array(z.string()).openapi({
            description:
              "The keys revoked with it: those it made, and theirs, that were live, but the calling key and the keys it made. Empty if it was already revoked.",
            example: ["key_abcdefghij0123456789"],
          }),
        }),
        "revoked, with the keys it made",
      ),
      ...errors(badId, tenantNotFound, keyNotFound, lastKey, keyLineConflict, AUTHENTICATED),
    },
  }),
  async (c) => {
    const { id, keyId } = c.req.valid("param");
    const { alsoRevoked } = await revokeKey(c.env, c.var.caller, id, keyId);
    return c.json({ id: keyId, revoked: true as const, alsoRevoked }, 200);
  },
);
