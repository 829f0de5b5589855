import type { Schedule } from "../schedule/next-fire";

/**
 * What counts towards a tenant's `maxJobs`: its live jobs. A job is live from its creation until
 * it is deleted or its schedule has no instant left: a one-off job once its instant has come, a
 * cron or interval job once its `endAt` has. Both are known from the job's definition and the
 * clock alone, so the catalog can count them (src/catalog/live-jobs.ts, the same rule in SQL)
 * with no row written when a job finishes. A job that finished by reaching its `maxRuns` stays
 * live until deleted: only its shard knows its fires. A paused job's instants pass as any other's.
 *
 * Schedules hold their instants as `toISOString()` gives them (canonicalSchedule, years 1970 to
 * 2099), so instants compare as strings, as SQLite compares them.
 */

/** The last instant a job's schedule names (ISO): a one-off's, or an `endAt`; null when it has none. */
export function lastInstantOf(schedule: Schedule): string | null {
  return schedule.at ?? schedule.endAt ?? null;
}

/** Whether a job is live at `at`: not deleted by then, and its schedule has an instant after it, or no last one. */
export function isLiveAt(job: { spec: { schedule: Schedule }; deletedAt: number | null }, at: number): boolean {
  if (job.deletedAt !== null && job.deletedAt <= at) return false;
  const last = lastInstantOf(job.spec.schedule);
  return last === null || last > new Date(at).toISOString();
}
