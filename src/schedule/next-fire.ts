import { nextCronFire } from "./cron";
import { parseDuration } from "./duration";

/**
 * A schedule as the API accepts it (validated before it gets here): exactly one of cron, at,
 * every; cron and interval schedules may be bounded by startAt, endAt and maxRuns.
 * (`delay` is turned into `at` when a job is created.)
 */
export interface Schedule {
  cron?: string;
  timezone?: string;
  at?: string;
  every?: string;
  startAt?: string;
  endAt?: string;
  maxRuns?: number;
}

/**
 * The first fire of a job created (or rescheduled) at `anchorMs`. A one-off instant already in
 * the past is due at once: the user asked for it to run. An interval with `startAt` fires at
 * startAt itself, then every interval after it.
 */
export function firstFire(schedule: Schedule, anchorMs: number): number | null {
  if (schedule.at !== undefined) return Date.parse(schedule.at);
  if (schedule.every !== undefined && schedule.startAt !== undefined) {
    const start = Date.parse(schedule.startAt);
    return start >= anchorMs ? start : nextFireAfter(schedule, anchorMs, anchorMs);
  }
  return nextFireAfter(schedule, anchorMs, anchorMs);
}

/**
 * The first fire strictly after `afterMs`, or null when the schedule has no more (past
 * `endAt`; maxRuns is counted by the shard). Intervals stay on the grid anchor + k·every,
 * anchored at startAt if given, else at `anchorMs` (the job's creation): a late alarm never
 * drifts the series.
 */
export function nextFireAfter(schedule: Schedule, anchorMs: number, afterMs: number): number | null {
  if (schedule.at !== undefined) return null;
  const startAt = schedule.startAt === undefined ? null : Date.parse(schedule.startAt);
  let next: number | null;
  if (schedule.every !== undefined) {
    const every = parseDuration(schedule.every);
    if (every === null) throw new Error(`not a duration: ${schedule.every}`);
    const anchor = startAt ?? anchorMs;
    if (afterMs < anchor) next = startAt !== null ? anchor : anchor + every;
    else next = anchor + (Math.floor((afterMs - anchor) / every) + 1) * every;
  } else if (schedule.cron !== undefined) {
    next = nextCronFire(schedule.cron, schedule.timezone ?? "UTC", startAt !== null ? Math.max(afterMs, startAt - 1) : afterMs);
  } else {
    throw new Error("schedule has none of cron, at, every");
  }
  const endAt = schedule.endAt === undefined ? null : Date.parse(schedule.endAt);
  return next !== null && endAt !== null && next > endAt ? null : next;
}

/** The fires in [from, to], at most `limit` of them (maxRuns is the shard's to count). */
export function firesBetween(schedule: Schedule, anchorMs: number, from: number, to: number, limit: number): number[] {
  const fires: number[] = [];
  if (schedule.at !== undefined) {
    const at = Date.parse(schedule.at);
    return at >= from && at <= to ? [at] : [];
  }
  for (
    let t = nextFireAfter(schedule, anchorMs, from - 1);
    t !== null && t <= to && fires.length < limit;
    t = nextFireAfter(schedule, anchorMs, t)
  ) {
    fires.push(t);
  }
  return fires;
}

/**
 * The first `count` fires of a schedule for a job created at `anchorMs`: what a preview shows,
 * computed by the same functions the shard fires by (jitter, per job, aside).
 */
export function upcomingFires(schedule: Schedule, anchorMs: number, count: number): number[] {
  const limit = Math.min(count, schedule.maxRuns ?? count);
  const fires: number[] = [];
  for (let t = firstFire(schedule, anchorMs); t !== null && fires.length < limit; t = nextFireAfter(schedule, anchorMs, t)) fires.push(t);
  return fires;
}
