import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { grantOf } from "../app/caller";
import { DEFAULT_TENANT } from "../model/ids";
import { SCOPES } from "../model/scopes";
import type { AppEnv } from "./context";
import { AUTHENTICATED } from "./error-cases";
import { bearer, errors, json } from "./route-parts";
import { validationHook } from "./validation";

/** What the caller's credential may do: the dashboard shows only that. */
export const me = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const MeSchema = z
  .object({
    admin: z.boolean().openapi({ description: "The admin token: every tenant, every scope." }),
    tenantId: z.string().openapi({ description: "The key's tenant (the admin token's own: `default`)." }),
    keyId: z.string().nullable().openapi({ description: "The key's id; null for the admin token." }),
    scopes: z.array(z.enum(SCOPES)),
    jobPrefix: z.string().nullable().openapi({ description: "Only jobs whose name starts with this; null: every job of the tenant." }),
  })
  .openapi("Me");

me.openapi(
  createRoute({
    method: "get",
    path: "/me",
    tags: ["API keys"],
    summary: "What this credential may do: its tenant, scopes and job prefix",
    security: bearer,
    responses: { 200: json(MeSchema, "the credential's grant"), ...errors(AUTHENTICATED) },
  }),
  (c) => {
    const caller = c.var.caller;
    const { scopes, jobPrefix } = grantOf(caller);
    return c.json(
      {
        admin: caller.admin,
        tenantId: caller.admin ? DEFAULT_TENANT : caller.tenant.id,
        keyId: caller.admin ? null : caller.key.id,
        scopes: [...scopes],
        jobPrefix,
      },
      200,
    );
  },
);
