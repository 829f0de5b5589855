import { Hono } from "hono";
import { seesSealed } from "../../app/caller";
import { cancelMessage, cancelMessages, findMessages, loadMessage } from "../../app/qstash/messages";
import { presentMessage } from "../../app/qstash/present";
import type { AppEnv } from "../context";
import { bulkIds, intQuery, many } from "./request";

/** /v2/messages: get one, cancel one, cancel many (by id, by filter, or all). */
export const messages = new Hono<AppEnv>();

messages.get("/messages/:id", async (c) =>
  c.json(await presentMessage(c.env, await loadMessage(c.env, c.var.caller, c.req.param("id")), seesSealed(c.var.caller)), 200),
);

messages.delete("/messages/:id", async (c) => {
  await cancelMessage(c.env, c.var.caller, c.req.param("id"));
  // The SDK's cancel(id) reads a JSON answer; its delete(id) reads none: this serves both.
  return c.json({ cancelled: 1 }, 200);
});

messages.delete("/messages", async (c) => {
  const ids = await bulkIds(c, "messageIds");
  if (ids) {
    const found = (await Promise.all(ids.map((id) => loadMessage(c.env, c.var.caller, id).catch(() => null)))).filter((j) => j !== null);
    return c.json({ cancelled: await cancelMessages(c.env, c.var.caller, found) }, 200);
  }
  const count = intQuery(c, "count", 1, 1_000) ?? 100;
  const jobs = await findMessages(
    c.env,
    c.var.caller,
    {
      url: many(c, "url"),
      queueName: many(c, "queueName"),
      topicName: many(c, "topicName"),
      label: many(c, "label"),
      fromDate: intQuery(c, "fromDate", 0, Number.MAX_SAFE_INTEGER),
      toDate: intQuery(c, "toDate", 0, Number.MAX_SAFE_INTEGER),
    },
    count,
  );
  return c.json({ cancelled: await cancelMessages(c.env, c.var.caller, jobs) }, 200);
});
