import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { shardStub, type Env } from "../env";
import { ErrorSchema } from "../model/common";
import { jobIdOfRun } from "../model/ids";
import { RunSchema } from "../model/run";
import { notFound } from "./errors";
import { loadJob } from "./jobs";
import { presentRun } from "./present";
import { validationHook } from "./validation";

export const runs = new OpenAPIHono<{ Bindings: Env }>({ defaultHook: validationHook });

runs.openapi(
  createRoute({
    method: "get",
    path: "/runs/{id}",
    summary: "Get a run with all its attempts",
    security: [{ bearer: [] }],
    request: { params: z.object({ id: z.string().openapi({ param: { name: "id", in: "path" } }) }) },
    responses: {
      200: { content: { "application/json": { schema: RunSchema } }, description: "the run" },
      404: { content: { "application/json": { schema: ErrorSchema } }, description: "unknown run" },
    },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const jobId = jobIdOfRun(id);
    if (!jobId) throw notFound("run", id);
    const job = await loadJob(c, jobId, { includeDeleted: true }).catch(() => {
      throw notFound("run", id);
    });
    const run = await shardStub(c.env, job.shard).getRun(id);
    if (!run) throw notFound("run", id);
    return c.json(presentRun(run), 200);
  },
);
