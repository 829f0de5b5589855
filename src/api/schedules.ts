import { createRoute, OpenAPIHono } from "@hono/zod-openapi";
import { canonicalSchedule, PreviewResultSchema, PreviewSchema } from "../model/job";
import { describeSchedule } from "../schedule/describe";
import { upcomingFires } from "../schedule/next-fire";
import type { AppEnv } from "./context";
import { AUTHENTICATED, invalid, JSON_BODY } from "./error-cases";
import { bearer, errors, json, jsonBody } from "./route-parts";
import { validationHook } from "./validation";

export const schedules = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

schedules.openapi(
  createRoute({
    method: "post",
    path: "/schedules/preview",
    tags: ["Schedules"],
    summary: "The next fire instants of a schedule, exactly as a job with it would fire",
    security: bearer,
    request: {
      body: jsonBody(PreviewSchema, {
        weekdays: {
          summary: "The next five weekday mornings in New York",
          value: { schedule: { cron: "0 9 * * 1-5", timezone: "America/New_York" }, from: "2026-12-01T00:00:00Z", count: 5 },
        },
        bounded: {
          summary: "An interval with an end, from now",
          value: { schedule: { every: "6h", endAt: "2027-01-01T00:00:00Z", maxRuns: 10 } },
        },
      }),
    },
    responses: {
      200: json(PreviewResultSchema, "the schedule in words and its next fires, in order"),
      ...errors(invalid("schedule.timezone", "unknown IANA time zone: Mars/Olympus"), JSON_BODY, AUTHENTICATED),
    },
  }),
  (c) => {
    const { schedule, from, count } = c.req.valid("json");
    const anchor = from === undefined ? Date.now() : Date.parse(from);
    const instants = upcomingFires(canonicalSchedule(schedule, anchor), anchor, count).map((t) => new Date(t).toISOString());
    // Described as written, so that a delay reads as one rather than as the instant it gives now.
    return c.json({ description: describeSchedule(schedule), instants }, 200);
  },
);
