import { Hono } from "hono";
import type { AppEnv } from "../context";
import { dlq } from "./dlq";
import { events } from "./events";
import { keys } from "./keys";
import { messages } from "./messages";
import { publishing } from "./publish";
import { queues } from "./queues";
import { schedules } from "./schedules";
import { topics } from "./topics";

/**
 * The /v2 surface: QStash's API, so that code written for the @upstash/qstash SDK works with
 * its baseUrl pointed at edgecron (docs/qstash.md). Authenticated like /v1, each tenant seeing
 * only its own; errors in QStash's shape (src/api/errors.ts).
 */
export const qstash = new Hono<AppEnv>();

qstash.route("/", publishing);
qstash.route("/", schedules);
qstash.route("/", messages);
qstash.route("/", dlq);
qstash.route("/", keys);
qstash.route("/", queues);
qstash.route("/", topics);
qstash.route("/", events);
