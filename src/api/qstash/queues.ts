import { Hono } from "hono";
import { z } from "zod";
import { queueLags } from "../../app/qstash/queue-groups";
import { deleteQueue, setQueuePaused, upsertQueue } from "../../app/qstash/queues";
import { tenantOf } from "../../app/qstash/tenant";
import { getQueueRow, listQueueRows, type QueueRow } from "../../catalog/qstash";
import { QstashInputError } from "../../qstash/errors";
import type { AppEnv } from "../context";
import { bodyText } from "./request";

/**
 * /v2/queues: named queues with a parallelism, paused or not, kept and shown as QStash shows
 * them; enqueueing needs the queue to exist. A queue is a flow-control group
 * (src/app/qstash/queue-groups.ts): its messages are held to its parallelism, none while it is
 * paused, and its `lag` is how many wait.
 */
export const queues = new Hono<AppEnv>();

const QUEUE_NAME = /^[A-Za-z0-9_.-]{1,100}$/;
const Upsert = z.object({
  queueName: z.string().regex(QUEUE_NAME, "1 to 100 letters, digits, _ . or -"),
  parallelism: z.int().min(1).max(1_000).optional(),
  paused: z.boolean().optional(),
});

const present = (q: QueueRow, lag: number) => ({
  name: q.name,
  parallelism: q.parallelism,
  paused: q.paused,
  lag,
  createdAt: q.createdAt,
  updatedAt: q.updatedAt,
});

async function loadQueue(env: Env, tenantId: string, name: string): Promise<QueueRow> {
  const q = await getQueueRow(env.DB, tenantId, name);
  if (!q) throw new QstashInputError("queue", `no queue named ${name}`, 404);
  return q;
}

queues.post("/queues", async (c) => {
  let json: unknown;
  try {
    json = JSON.parse(await bodyText(c));
  } catch {
    throw new QstashInputError("body", "not JSON: send { queueName, parallelism?, paused? }");
  }
  const parsed = Upsert.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new QstashInputError(issue.path.join(".") || "body", issue.message);
  }
  const { queueName, parallelism, paused } = parsed.data;
  await upsertQueue(c.env, c.var.caller, queueName, { parallelism, paused });
  return c.json({}, 200);
});

queues.get("/queues", async (c) => {
  const tenantId = tenantOf(c.var.caller);
  const rows = await listQueueRows(c.env.DB, tenantId);
  const lags = await queueLags(
    c.env,
    tenantId,
    rows.map((q) => q.name),
  );
  return c.json(
    rows.map((q) => present(q, lags.get(q.name) ?? 0)),
    200,
  );
});

queues.get("/queues/:name", async (c) => {
  const tenantId = tenantOf(c.var.caller);
  const q = await loadQueue(c.env, tenantId, c.req.param("name"));
  return c.json(present(q, (await queueLags(c.env, tenantId, [q.name])).get(q.name) ?? 0), 200);
});

queues.delete("/queues/:name", async (c) => {
  const name = c.req.param("name");
  if (!(await deleteQueue(c.env, c.var.caller, name))) throw new QstashInputError("queue", `no queue named ${name}`, 404);
  return c.json({}, 200);
});

for (const action of ["pause", "resume"] as const) {
  queues.post(`/queues/:name/${action}`, async (c) => {
    const name = c.req.param("name");
    if (!(await setQueuePaused(c.env, c.var.caller, name, action === "pause"))) {
      throw new QstashInputError("queue", `no queue named ${name}`, 404);
    }
    return c.json({}, 200);
  });
}
