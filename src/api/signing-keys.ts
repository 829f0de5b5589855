import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { rotateSigning, type SigningKeys, setLegacySignature, signingKeys } from "../app/signing";
import { REQUEST_SIGNATURE_HEADER } from "../security/request-signature";
import { SIGNATURE_HEADER } from "../security/signing";
import type { AppEnv } from "./context";
import { AUTHENTICATED, invalid, JSON_BODY, tenantNotFound } from "./error-cases";
import { bearer, errors, json, jsonBody } from "./route-parts";
import { validationHook } from "./validation";

/** The secrets targets verify requests with; see src/verify.ts. */
export const signing = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const SigningKeysSchema = z
  .object({
    tenantId: z.string(),
    header: z.string().openapi({ example: REQUEST_SIGNATURE_HEADER, description: "The header to verify (src/verify.ts's verifyRequest)." }),
    legacyHeader: z.string().nullable().openapi({
      example: SIGNATURE_HEADER,
      description: "The first scheme's header, sent beside it while `legacySignature` is on; null once off.",
    }),
    legacySignature: z.boolean().openapi({
      description:
        "Requests also carry the first scheme (Edgecron-Signature), which covers neither method, URL nor Idempotency-Key. On for tenants from before V2, off for new ones.",
    }),
    current: z.string().openapi({ description: "Requests are signed with this secret…" }),
    next: z.string().openapi({ description: "…and with this one, which becomes current at the next rotation." }),
  })
  .openapi("SigningKeys");

const TenantQuery = z.object({
  tenantId: z.string().max(100).optional().openapi({ description: "Admin only: whose keys (default: the admin's own tenant, `default`)." }),
});

const badTenant = invalid("tenantId", "Too big: expected string to have <=100 characters");

const presentSigning = ({ tenantId, current, next, legacySignature }: SigningKeys) => ({
  tenantId,
  header: REQUEST_SIGNATURE_HEADER,
  legacyHeader: legacySignature ? SIGNATURE_HEADER : null,
  legacySignature,
  current,
  next,
});

signing.openapi(
  createRoute({
    method: "get",
    path: "/signing-keys",
    tags: ["Signing keys"],
    summary: "The secrets targets verify Edgecron-Signature-V2 with, and which schemes are sent",
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

signing.openapi(
  createRoute({
    method: "patch",
    path: "/signing-keys",
    tags: ["Signing keys"],
    summary: "Keep or stop the first signature scheme (Edgecron-Signature) beside V2",
    description:
      "Edgecron-Signature-V2 is always sent. Turn `legacySignature` off once every target verifies V2: from then on requests carry V2 only.",
    security: bearer,
    request: {
      query: TenantQuery,
      body: jsonBody(z.strictObject({ legacySignature: z.boolean() }), {
        off: { summary: "End the deprecation period: V2 only", value: { legacySignature: false } },
      }),
    },
    responses: {
      200: json(SigningKeysSchema, "the secrets and the schemes now sent"),
      ...errors(
        invalid("legacySignature", "Invalid input: expected boolean, received string"),
        JSON_BODY,
        badTenant,
        tenantNotFound,
        AUTHENTICATED,
      ),
    },
  }),
  async (c) => {
    const { legacySignature } = c.req.valid("json");
    return c.json(presentSigning(await setLegacySignature(c.env, c.var.caller, c.req.valid("query").tenantId, legacySignature)), 200);
  },
);
