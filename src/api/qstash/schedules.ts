import { type Context, Hono } from "hono";
import { seesSealed } from "../../app/caller";
import { presentSchedule } from "../../app/qstash/present";
import { deleteSchedule, getSchedule, listSchedules, pauseSchedule, upsertSchedule } from "../../app/qstash/schedules";
import { parseDestination } from "../../qstash/destination";
import { parseMessageHeaders } from "../../qstash/headers";
import type { AppEnv } from "../context";
import { callerIpOf, messageBody, restOfPath } from "./request";

/** /v2/schedules: create or upsert, list, get, delete, pause and resume (PATCH, as the SDK sends, and POST). */
export const schedules = new Hono<AppEnv>();

schedules.get("/schedules", async (c) => {
  const states = await listSchedules(c.env, c.var.caller);
  return c.json(
    await Promise.all(
      states.map((s) => presentSchedule(c.env, s.row.scheduleId, s.job, s.row.createdAt, s.nextRunAt, seesSealed(c.var.caller))),
    ),
    200,
  );
});

for (const action of ["pause", "resume"] as const) {
  const handler = async (c: Context<AppEnv>) => {
    await pauseSchedule(c.env, c.var.caller, c.req.param("id")!, action === "pause");
    return c.json({}, 200);
  };
  schedules.patch(`/schedules/:id/${action}`, handler);
  schedules.post(`/schedules/:id/${action}`, handler);
}

schedules.get("/schedules/:id", async (c) => {
  const s = await getSchedule(c.env, c.var.caller, c.req.param("id"));
  return c.json(await presentSchedule(c.env, s.row.scheduleId, s.job, s.row.createdAt, s.nextRunAt, seesSealed(c.var.caller)), 200);
});

schedules.delete("/schedules/:id", async (c) => {
  await deleteSchedule(c.env, c.var.caller, c.req.param("id"));
  return c.json({}, 200);
});

schedules.post("/schedules/*", async (c) => {
  const { rest, search } = restOfPath(c, "/v2/schedules/");
  const answer = await upsertSchedule(c.env, c.var.caller, {
    destination: parseDestination(rest, search),
    options: parseMessageHeaders(c.req.raw.headers, Date.now()),
    body: await messageBody(c),
    callerIp: callerIpOf(c),
  });
  return c.json(answer, 200);
});
