import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { rotateSigning, type SigningKeys, signingKeys } from "../app/signing";
import { SIGNATURE_HEADER } from "../security/signing";
import type { AppEnv } from "./context";
import { AUTHENTICATED, invalid, tenantNotFound } from "./error-cases";
import { bearer, errors, json } from "./route-parts";
import { validationHook } from "./validation";

/** The secrets targets verify requests with; see src/verify.ts. */
export const signing = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

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

const badTenant = invalid("tenantId", "Too big: expected string to have <=100 characters");

const presentSigning = ({ tenantId, current, next }: SigningKeys) => ({ tenantId, header: SIGNATURE_HEADER, current, next });

signing.openapi(
  createRoute({
    method: "get",
    path: "/signing-keys",
    tags: ["Signing keys"],
    summary: "The secrets targets verify Edgecron-Signature with",
    security: bearer,
    request: { query: TenantQuery },
    responses: { 200: json(SigningKeysSchema, "the current and next secret"), ...errors(badTenant, tenantNotFound, AUTHENTICATED) },
  }),
  async (c) => c.json(presentSigning(await signingKeys(c.env, c.var.caller, c.req.valid("query").tenantId)), 200),
);

signing.openapi(
  createRoute({
    method: "post",
    path: "/signing-keys/rotate",
    tags: ["Signing keys"],
    summary: "Rotate: next becomes current, a new next appears, the old current stops being used",
    description:
      "Give targets the new `next` before the following rotation. Requests in flight keep verifying: each is signed with current and next.",
    security: bearer,
    request: { query: TenantQuery },
    responses: { 200: json(SigningKeysSchema, "the secrets after rotation"), ...errors(badTenant, tenantNotFound, AUTHENTICATED) },
  }),
  async (c) => c.json(presentSigning(await rotateSigning(c.env, c.var.caller, c.req.valid("query").tenantId)), 200),
);
