import { Hono } from "hono";
import { seesSealed } from "../../app/caller";
import { type EventFilter, listEvents } from "../../app/qstash/events";
import { QstashInputError } from "../../qstash/errors";
import type { LogState } from "../../qstash/events";
import { reducedUrl } from "../../security/reduced";
import type { AppEnv } from "../context";
import { ids, intQuery, many } from "./request";

/** GET /v2/events: messages' logs, with a cursor and QStash's filters (src/app/qstash/events.ts). */
export const events = new Hono<AppEnv>();

const STATES: LogState[] = ["CREATED", "ACTIVE", "DELIVERED", "ERROR", "RETRY", "FAILED", "CANCELED", "IN_PROGRESS"];

events.get("/events", async (c) => {
  const state = many(c, "state");
  const bad = state?.find((s) => !(STATES as string[]).includes(s));
  if (bad !== undefined) throw new QstashInputError("state", `"${bad}" is not one of ${STATES.join(", ")}`);
  const filter: EventFilter = {
    messageIds: ids(c, "messageIds") ?? ids(c, "messageId"),
    state: state as LogState[] | undefined,
    url: many(c, "url"),
    topicName: many(c, "topicName"),
    scheduleId: many(c, "scheduleId"),
    queueName: many(c, "queueName"),
    label: many(c, "label"),
    fromDate: intQuery(c, "fromDate", 0, Number.MAX_SAFE_INTEGER),
    toDate: intQuery(c, "toDate", 0, Number.MAX_SAFE_INTEGER),
  };
  const cursor = c.req.query("cursor") || undefined;
  if (cursor !== undefined && !/^job_[0-9a-z]{19}$/.test(cursor)) throw new QstashInputError("cursor", "not a cursor this API answered");
  const page = await listEvents(c.env, c.var.caller, { count: intQuery(c, "count", 1, 1_000) ?? 100, cursor, filter });
  // An event names its message's URL, sealed at rest: a `read` key is shown its origin.
  if (!seesSealed(c.var.caller)) page.events = page.events.map((e) => ({ ...e, url: reducedUrl(e.url) }));
  return c.json(page, 200);
});
