import { Hono } from "hono";
import { seesSealed } from "../../app/caller";
import { deleteDeadLetters, getDeadLetter, listDeadLetters, retryDeadLetters } from "../../app/qstash/dead-letters";
import { presentDeadLetter } from "../../app/qstash/present";
import { QstashInputError } from "../../qstash/errors";
import { messageIdOfJob, messageIdOfRun } from "../../qstash/ids";
import type { AppContext, AppEnv } from "../context";
import { bulkIds, ids as idList, intQuery, many } from "./request";

/** /v2/dlq over edgecron's dead letters: list (cursor, filters), get, delete one or many, retry one or many. */
export const dlq = new Hono<AppEnv>();

const filterOf = (c: AppContext) => ({
  messageId: many(c, "messageId"),
  topicName: many(c, "topicName"),
  scheduleId: many(c, "scheduleId"),
  url: many(c, "url"),
  queueName: many(c, "queueName"),
  label: many(c, "label"),
  responseStatus: intQuery(c, "responseStatus", 100, 599),
  fromDate: intQuery(c, "fromDate", 0, Number.MAX_SAFE_INTEGER),
  toDate: intQuery(c, "toDate", 0, Number.MAX_SAFE_INTEGER),
});

/** The dead letters a bulk call is about: the ids given, or those the filter finds (up to `count`). */
async function targets(c: AppContext): Promise<string[]> {
  const ids = await bulkIds(c, "dlqIds");
  if (ids) return ids;
  const cursor = c.req.query("cursor") || undefined;
  const page = await listDeadLetters(c.env, c.var.caller, { count: intQuery(c, "count", 1, 200) ?? 100, cursor, filter: filterOf(c) });
  return page.items.map((d) => d.run.id);
}

dlq.get("/dlq", async (c) => {
  const ids = idList(c, "dlqIds");
  if (ids) {
    const found = (await Promise.all(ids.map((id) => getDeadLetter(c.env, c.var.caller, id).catch(() => null)))).filter((d) => d !== null);
    return c.json({ messages: await Promise.all(found.map((d) => presentDeadLetter(c.env, d.run, d.job, seesSealed(c.var.caller)))) }, 200);
  }
  const cursor = c.req.query("cursor") || undefined;
  const page = await listDeadLetters(c.env, c.var.caller, { count: intQuery(c, "count", 1, 200) ?? 100, cursor, filter: filterOf(c) });
  const messages = await Promise.all(page.items.map((d) => presentDeadLetter(c.env, d.run, d.job, seesSealed(c.var.caller))));
  return c.json({ messages, ...(page.cursor !== undefined && { cursor: page.cursor }) }, 200);
});

dlq.get("/dlq/:id", async (c) => {
  const d = await getDeadLetter(c.env, c.var.caller, c.req.param("id"));
  return c.json(await presentDeadLetter(c.env, d.run, d.job, seesSealed(c.var.caller)), 200);
});

dlq.delete("/dlq/:id", async (c) => {
  const id = c.req.param("id");
  const deleted = await deleteDeadLetters(c.env, c.var.caller, [id]);
  if (deleted === 0) throw new QstashInputError("dlqId", `no dead letter with id ${id}`, 404);
  return c.json({ deleted }, 200);
});

dlq.delete("/dlq", async (c) => c.json({ deleted: await deleteDeadLetters(c.env, c.var.caller, await targets(c)) }, 200));

dlq.post("/dlq/retry", async (c) => {
  const retried = await retryDeadLetters(c.env, c.var.caller, await targets(c));
  const responses = retried.map((d) => ({
    messageId: d.job.spec.target?.qstash?.scheduleId ? messageIdOfRun(d.run.id) : messageIdOfJob(d.job.id),
  }));
  return c.json({ responses }, 200);
});
