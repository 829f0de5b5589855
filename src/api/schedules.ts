import { createRoute, OpenAPIHono } from "@hono/zod-openapi";
import { canonicalSchedule, PreviewResultSchema, PreviewSchema } from "../model/job";
import { describeSchedule } from "../schedule/describe";
import { upcomingFires } from "../schedule/next-fire";
import type { AppEnv } from "./context";
import { bearer, errors, json } from "./route-parts";
import { validationHook } from "./validation";

export const schedules = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

schedules.openapi(
  createRoute({
    method: "post",
    path: "/schedules/preview",
    summary: "The next fire instants of a schedule, exactly as a job with it would fire",
    security: bearer,
    request: { body: { content: { "application/json": { schema: PreviewSchema } }, required: true } },
    responses: { 200: json(PreviewResultSchema, "the schedule in words and its next fires, in order"), ...errors(400) },
  }),
  (c) => {
    const { schedule, from, count } = c.req.valid("json");
    const anchor = from === undefined ? Date.now() : Date.parse(from);
    const instants = upcomingFires(canonicalSchedule(schedule, anchor), anchor, count).map((t) => new Date(t).toISOString());
    // Described as written, so that a delay reads as one rather than as the instant it gives now.
    return c.json({ description: describeSchedule(schedule), instants }, 200);
  },
);
