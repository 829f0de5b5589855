import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { readAudit } from "../app/audit";
import type { AuditEntry } from "../catalog/audit";
import { pageOf } from "../model/common";
import { Instant } from "../model/job";
import type { AppEnv } from "./context";
import { AUTHENTICATED, badCursor, invalid } from "./error-cases";
import { bearer, errors, json } from "./route-parts";
import { validationHook } from "./validation";

/** GET /v1/audit: every change made through the API, newest first. */
export const audit = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

const AuditEntrySchema = z
  .object({
    id: z.string().openapi({ example: "aud_0mihx2k3f8a1b2c3d4e5" }),
    tenantId: z.string(),
    at: z.string(),
    actor: z.string().openapi({ description: "The key's id (never the key), or `admin` / `admin:next` for the admin token." }),
    action: z.string().openapi({ example: "job.patch" }),
    subject: z.string().openapi({ description: "The id of what changed: a job, a run, a key, a tenant." }),
    client: z.string().nullable().openapi({ description: "The client's address, when known." }),
    change: z.object({ before: z.unknown(), after: z.unknown() }).openapi({ description: "What it was and became; secrets redacted." }),
  })
  .openapi("AuditEntry");

const AuditQuery = z.object({
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(100).optional(),
  action: z
    .string()
    .regex(/^[a-z_]+(\.[a-z_]+)?$/, "an action (job.patch) or a kind of them (job)")
    .optional()
    .openapi({ description: "One action (`job.patch`) or every action of a kind (`job`)." }),
  actor: z.string().max(100).optional().openapi({ description: "A key id, or `admin`." }),
  subject: z.string().max(200).optional().openapi({ description: "A job, run, key or tenant id." }),
  since: Instant.optional().openapi({ description: "Entries at or after this instant." }),
  until: Instant.optional().openapi({ description: "Entries at or before this instant." }),
  tenantId: z.string().max(100).optional().openapi({ description: "Admin token only: one tenant's entries (default: every tenant's)." }),
});

const presentEntry = (e: AuditEntry) => ({ ...e, at: new Date(e.at).toISOString() });

audit.openapi(
  createRoute({
    method: "get",
    path: "/audit",
    tags: ["Audit"],
    summary: "The audit log: who changed what, when and from where, newest first",
    description:
      "Every change made through the API is recorded in the same D1 transaction as the change (a trigger, backfill or retry, which the job's shard makes, right after it). A key reads its own tenant's entries; the admin token every tenant's.",
    security: bearer,
    request: { query: AuditQuery },
    responses: {
      200: json(pageOf(AuditEntrySchema), "a page of entries"),
      ...errors(invalid("action", "an action (job.patch) or a kind of them (job)"), badCursor, AUTHENTICATED),
    },
  }),
  async (c) => {
    const { since, until, ...query } = c.req.valid("query");
    const page = await readAudit(c.env, c.var.caller, {
      ...query,
      since: since === undefined ? undefined : Date.parse(since),
      until: until === undefined ? undefined : Date.parse(until),
    });
    return c.json({ items: page.items.map(presentEntry), nextCursor: page.nextCursor }, 200);
  },
);
