import { nextCronFire } from "./cron";
import { parseDuration } from "./duration";

/** A schedule as the API accepts it: exactly one of cron, at, every (validated before it gets here). */
export interface Schedule {
  cron?: string;
  timezone?: string;
  at?: string;
  every?: string;
}

/**
 * The first fire of a job created (or resumed) at `anchorMs`.
 * A one-off instant already in the past is due at once: the user asked for it to run.
 */
export function firstFire(schedule: Schedule, anchorMs: number): number | null {
  if (schedule.at !== undefined) return Date.parse(schedule.at);
  return nextFireAfter(schedule, anchorMs, anchorMs);
}

/**
 * The first fire strictly after `afterMs`, or null when the schedule has no more.
 * Intervals stay on the grid anchorMs + k·every, so a late alarm never drifts the series.
 */
export function nextFireAfter(schedule: Schedule, anchorMs: number, afterMs: number): number | null {
  if (schedule.at !== undefined) return null;
  if (schedule.every !== undefined) {
    const every = parseDuration(schedule.every);
    if (every === null) throw new Error(`not a duration: ${schedule.every}`);
    const steps = afterMs < anchorMs ? 0 : Math.floor((afterMs - anchorMs) / every) + 1;
    return anchorMs + steps * every;
  }
  if (schedule.cron === undefined) throw new Error("schedule has none of cron, at, every");
  return nextCronFire(schedule.cron, schedule.timezone ?? "UTC", afterMs);
}
