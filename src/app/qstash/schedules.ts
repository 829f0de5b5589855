import { ApiError, notFound } from "../../api/errors";
import { type CatalogJob, getJob, getJobsByIds } from "../../catalog/jobs";
import { deleteScheduleRow, getScheduleRow, listScheduleRows, putScheduleRow, type ScheduleRow } from "../../catalog/qstash";
import { failpoint } from "../../faults";
import type { Destination } from "../../qstash/destination";
import { QstashInputError } from "../../qstash/errors";
import type { MessageOptions } from "../../qstash/headers";
import { newScheduleId } from "../../qstash/ids";
import { audit, entryOf } from "../audit";
import type { Caller } from "../caller";
import { changeJob, readJob } from "../jobs";
import { parseCron } from "./cron";
import { createQstashJobs } from "./jobs";
import { tenantOf } from "./tenant";

/**
 * Schedules: each is an edgecron cron job, so that it shows in /v1, the dashboard and the CLI;
 * its QStash id maps to the job (qstash_schedules). Upserting an existing id creates the new
 * version's job, moves the id to it (a compare-and-set) and deletes the old one, so a fire never
 * runs with half of each. The job's
 * changes are audited as a job's; the id's mapping has its own entries (schedule.create,
 * schedule.update, schedule.delete), each in the batch that writes it.
 */
export interface ScheduleRequest {
  destination: Destination;
  options: MessageOptions;
  body: string | Uint8Array;
  callerIp?: string;
}

export async function upsertSchedule(env: Env, caller: Caller, request: ScheduleRequest): Promise<{ scheduleId: string }> {
  const { destination, options } = request;
  if (options.cron === undefined) throw new QstashInputError("Upstash-Cron", "required: the schedule's cron expression");
  const schedule = parseCron(options.cron);
  if (!("url" in destination))
    throw new QstashInputError("destination", "a schedule's destination must be a URL (URL groups are not supported for schedules)");
  if (options.delayMs > 0)
    throw new QstashInputError("Upstash-Delay", "not supported on schedules: each fire is delivered at its cron time");
  if (options.queueName !== undefined) throw new QstashInputError("Upstash-Queue-Name", "not supported on schedules");
  const tenantId = tenantOf(caller);
  const scheduleId = options.scheduleId ?? newScheduleId();
  const [job] = await createQstashJobs(
    env,
    caller,
    [
      {
        url: destination.url,
        options,
        body: request.body,
        schedule,
        name: `qstash schedule ${scheduleId}`,
        meta: {
          retries: options.retries,
          scheduleId,
          ...(options.retryDelay !== undefined && { retryDelay: options.retryDelay }),
          ...(options.callback && { callback: options.callback }),
          ...(options.failureCallback && { failureCallback: options.failureCallback }),
          ...(options.label !== undefined && { label: options.label }),
          ...(request.callerIp !== undefined && { callerIp: request.callerIp }),
        },
      },
    ],
    "schedules",
  );
  failpoint("qstash.scheduleStep", "created");
  // The id moves from the job last read to the new one by a compare-and-set: an upsert that lost
  // a race reads again and moves it from the winner's job, which it then deletes, so concurrent
  // upserts end with the id naming the last one's job and every other job deleted. A crash
  // between these steps leaves a job no id names: the sweep deletes it (schedule-orphans.ts).
  let previous = await getScheduleRow(env.DB, tenantId, scheduleId);
  for (let tries = 1; ; tries++) {
    // The job's creation has its own entry; this one says which job the schedule's id now names.
    const entry = entryOf(caller, {
      tenantId,
      action: previous ? "schedule.update" : "schedule.create",
      subject: scheduleId,
      before: previous && { jobId: previous.jobId },
      after: { jobId: job!.id, origin: new URL(destination.url).origin, cron: options.cron },
    });
    const moved = await putScheduleRow(env.DB, tenantId, scheduleId, job!.id, previous?.jobId ?? null, Date.now(), [
      audit(env.DB, entry, { ifChanged: true }),
    ]);
    if (moved) break;
    previous = await getScheduleRow(env.DB, tenantId, scheduleId);
    if (tries >= MAX_MOVES) {
      await changeJob(env, caller, job!.id, { deleted: true }).catch(ignoreGone);
      throw new ApiError(409, "conflict", `schedule ${scheduleId} is being changed by other requests; retry`);
    }
  }
  failpoint("qstash.scheduleStep", "named");
  if (previous && previous.jobId !== job!.id) await changeJob(env, caller, previous.jobId, { deleted: true }).catch(ignoreGone);
  return { scheduleId };
}

/** Compare-and-set tries of an upsert before it gives up to the others changing its schedule (a 409). */
const MAX_MOVES = 10;

const ignoreGone = (err: unknown) => {
  if (!(err instanceof Error && "status" in err && err.status === 404)) throw err;
};

export interface ScheduleState {
  row: ScheduleRow;
  job: CatalogJob;
  nextRunAt: number | null;
}

async function rowOf(env: Env, caller: Caller, scheduleId: string): Promise<ScheduleRow> {
  const row = await getScheduleRow(env.DB, tenantOf(caller), scheduleId);
  if (!row) throw notFound("schedule", scheduleId);
  return row;
}

export async function getSchedule(env: Env, caller: Caller, scheduleId: string): Promise<ScheduleState> {
  const row = await rowOf(env, caller, scheduleId);
  const { job, runtime } = await readJob(env, caller, row.jobId).catch((err: unknown) => {
    throw err instanceof Error && "status" in err && err.status === 404 ? notFound("schedule", scheduleId) : err;
  });
  return { row, job, nextRunAt: runtime?.nextRunAt ?? null };
}

export async function listSchedules(env: Env, caller: Caller): Promise<ScheduleState[]> {
  const rows = await listScheduleRows(env.DB, tenantOf(caller));
  const jobs = new Map(
    (
      await getJobsByIds(
        env.DB,
        rows.map((r) => r.jobId),
      )
    ).map((j) => [j.id, j]),
  );
  return rows.flatMap((row) => {
    const job = jobs.get(row.jobId);
    return job && job.deletedAt === null ? [{ row, job, nextRunAt: null }] : [];
  });
}

export async function deleteSchedule(env: Env, caller: Caller, scheduleId: string): Promise<void> {
  const row = await rowOf(env, caller, scheduleId);
  if (await getJob(env.DB, row.jobId)) await changeJob(env, caller, row.jobId, { deleted: true }).catch(ignoreGone);
  const tenantId = tenantOf(caller);
  const entry = entryOf(caller, { tenantId, action: "schedule.delete", subject: scheduleId, before: { jobId: row.jobId }, after: null });
  await deleteScheduleRow(env.DB, tenantId, scheduleId, [audit(env.DB, entry, { ifChanged: true })]);
}

/** Pauses or resumes the schedule's job: audited as the job's change (job.pause, job.resume), which schedule.create names. */
export async function pauseSchedule(env: Env, caller: Caller, scheduleId: string, paused: boolean): Promise<void> {
  const row = await rowOf(env, caller, scheduleId);
  await changeJob(env, caller, row.jobId, { paused });
}
