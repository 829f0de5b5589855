import { Hono } from "hono";
import { z } from "zod";
import { type PublishRequest, publish } from "../../app/qstash/publish";
import { parseDestination } from "../../qstash/destination";
import { QstashInputError } from "../../qstash/errors";
import { parseMessageHeaders } from "../../qstash/headers";
import type { AppEnv } from "../context";
import { bodyText, callerIpOf, messageBody, restOfPath } from "./request";

/** POST /v2/publish/{destination}, /v2/enqueue/{queue}/{destination}, /v2/batch. */
export const publishing = new Hono<AppEnv>();

/** Most messages one batch may publish: edgecron's batch create's. */
const MAX_BATCH = 1_000;

publishing.post("/publish/*", async (c) => {
  const { rest, search } = restOfPath(c, "/v2/publish/");
  const request: PublishRequest = {
    destination: parseDestination(rest, search),
    options: parseMessageHeaders(c.req.raw.headers, Date.now()),
    body: await messageBody(c),
    callerIp: callerIpOf(c),
  };
  const [answer] = await publish(c.env, c.var.caller, [request]);
  return c.json(answer, 200);
});

publishing.post("/enqueue/:queue/*", async (c) => {
  const { rest: after, search } = restOfPath(c, "/v2/enqueue/");
  const slash = after.indexOf("/");
  const queue = queueNameOf(after.slice(0, slash));
  const rest = after.slice(slash + 1);
  const request: PublishRequest = {
    destination: parseDestination(rest, search),
    options: parseMessageHeaders(c.req.raw.headers, Date.now()),
    body: await messageBody(c),
    queueName: queue,
    callerIp: callerIpOf(c),
  };
  const [answer] = await publish(c.env, c.var.caller, [request]);
  return c.json(answer, 200);
});

/** The queue's segment, unescaped; a `%` that starts no escape is the caller's mistake, not ours. */
function queueNameOf(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new QstashInputError("queue", `"${segment}" is not a queue name: a % must start an escape such as %2D`);
  }
}

const BatchItem = z.object({
  destination: z.string().min(1).max(4_096),
  headers: z.record(z.string(), z.string()).optional(),
  body: z.string().optional(),
  queue: z.string().min(1).max(100).optional(),
});

publishing.post("/batch", async (c) => {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await bodyText(c));
  } catch (err) {
    if (err instanceof QstashInputError) throw err;
    throw new QstashInputError("body", "not JSON: send an array of { destination, headers?, body?, queue? }");
  }
  if (!Array.isArray(parsed) || parsed.length === 0 || parsed.length > MAX_BATCH) {
    throw new QstashInputError("body", `must be an array of 1 to ${MAX_BATCH} messages`);
  }
  const now = Date.now();
  const callerIp = callerIpOf(c);
  const requests = parsed.map((raw, i): PublishRequest => {
    const item = BatchItem.safeParse(raw);
    if (!item.success) {
      const issue = item.error.issues[0]!;
      throw new QstashInputError(`[${i}].${issue.path.join(".") || "(message)"}`, issue.message);
    }
    const { destination, headers, body, queue } = item.data;
    try {
      return {
        destination: parseDestination(destination, ""),
        options: parseMessageHeaders(new Headers(headers ?? {}), now),
        body: body ?? "",
        ...(queue !== undefined && { queueName: queue }),
        callerIp,
      };
    } catch (err) {
      if (err instanceof QstashInputError)
        throw new QstashInputError(`[${i}].${err.field}`, err.message.slice(err.field.length + 2), err.status);
      throw err;
    }
  });
  return c.json(await publish(c.env, c.var.caller, requests), 200);
});
