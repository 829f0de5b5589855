import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { createJobs, MAX_BATCH_JOBS } from "../app/create-jobs";
import { ErrorSchema } from "../model/common";
import { JobSchema } from "../model/job";
import { MAX_BATCH_BODY_BYTES } from "./auth";
import type { AppEnv } from "./context";
import { AUTHENTICATED, invalid, jsonBodyCases } from "./error-cases";
import { present } from "./jobs";
import { bearer, errors, json, jsonBody } from "./route-parts";
import { validationHook } from "./validation";

export const jobsBatch = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

/**
 * The request's items are checked one by one in src/app/create-jobs.ts, so that a bad item
 * fails alone; the document still says what each must be: exactly what POST /v1/jobs takes.
 */
const BatchCreateSchema = z
  .strictObject({
    jobs: z
      .array(z.unknown())
      .min(1)
      .max(MAX_BATCH_JOBS)
      .openapi({
        items: { $ref: "#/components/schemas/CreateJob" },
        description: `1 to ${MAX_BATCH_JOBS.toLocaleString("en")} jobs, each as POST /v1/jobs takes it.`,
      }),
  })
  .openapi("BatchCreate");

const BatchItemSchema = z
  .union([
    z.object({ index: z.int(), status: z.literal(201), job: JobSchema }),
    z.object({
      index: z.int(),
      status: z.int().min(400).max(499).openapi({ description: "What POST /v1/jobs would have answered for this item alone." }),
      error: ErrorSchema.shape.error,
    }),
  ])
  .openapi("BatchCreateItem");

const BatchResultSchema = z
  .object({
    created: z.int(),
    failed: z.int(),
    results: z.array(BatchItemSchema).openapi({ description: "One per item, in the request's order; `index` is the item's." }),
  })
  .openapi("BatchCreateResult");

const TARGET = { url: "https://example.com/hooks/remind", method: "POST" as const };

jobsBatch.openapi(
  createRoute({
    method: "post",
    path: "/jobs/batch",
    tags: ["Jobs"],
    summary: `Create up to ${MAX_BATCH_JOBS.toLocaleString("en")} jobs in one request, each answered on its own`,
    description:
      "Each item is checked and created as POST /v1/jobs would create it, under the same quota: its result is the job (status 201) or the error POST /v1/jobs would have answered, its fields named from the request's root (`jobs[3].schedule.cron`). An item refused writes nothing; the others are created. The answer is 200 whatever the items' fates; a request that is not a list of 1 to 1,000 items is refused whole (400 naming `jobs`).",
    security: bearer,
    request: {
      body: jsonBody(BatchCreateSchema, {
        reminders: {
          summary: "Two one-off reminders",
          value: {
            jobs: [
              { name: "remind-u1", schedule: { delay: "1h" }, target: { ...TARGET, body: { user: "u_1" } } },
              { name: "remind-u2", schedule: { delay: "2h" }, target: { ...TARGET, body: { user: "u_2" } } },
            ],
          },
        },
      }),
    },
    responses: {
      200: json(BatchResultSchema, "each item's result, in order"),
      ...errors(
        invalid("jobs", `Too big: expected array to have <=${MAX_BATCH_JOBS} items`),
        jsonBodyCases(MAX_BATCH_BODY_BYTES),
        AUTHENTICATED,
      ),
    },
  }),
  async (c) => {
    const outcomes = await createJobs(c.env, c.var.caller, c.req.valid("json").jobs);
    const results = await Promise.all(
      outcomes.map(async (o) =>
        "state" in o
          ? { index: o.index, status: 201 as const, job: await present(c, o.state) }
          : {
              index: o.index,
              status: o.error.status,
              error: { code: o.error.code, message: o.error.message, ...(o.error.issues && { issues: o.error.issues }) },
            },
      ),
    );
    const created = results.filter((r) => r.status === 201).length;
    return c.json({ created, failed: results.length - created, results }, 200);
  },
);
