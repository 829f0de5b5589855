import type { JobSpec, Notify } from "../model/job";
import type { RunState } from "../model/run-states";
import type { AttemptRow, JobDefinition, RunRow, TenantSettings } from "../protocol/stored-rows";

/**
 * The shard's rows as the code sees them: each table's columns turned into its typed shape in
 * one place, so that a column added by a migration is read in one place too.
 */

export interface ShardJob extends JobDefinition {
  nextFireAt: number | null;
  fires: number;
  rateNextAt: number | null;
  /** Runs in a row that ended dead or failed (kept for jobs with pauseAfterFailures only). */
  failureStreak: number;
  /** When its next fire is due (the fire plus its jitter): `soon_at` for a frequent job, `next_due_at` for others. */
  dueAt: number | null;
  /** It fires at least once per claim timeout (frequent-jobs.ts). */
  frequent: boolean;
  /**
   * The fire its row names, when the alarm has fired it and left the row as it was
   * (fired-through.ts). Otherwise null.
   */
  firedAt: number | null;
  /** Read by a run's entry from before the job's last change, or while it is paused, deleted or frequent: passed without a fire (fired-through.ts). */
  stale?: boolean;
}

/** A job asks how its runs end when it pauses itself after failures, sends notifications or triggers other jobs. */
export function watchesOutcomes(spec: Pick<JobSpec, "pauseAfterFailures" | "notify" | "onSuccess" | "onFailure">): boolean {
  return spec.pauseAfterFailures !== undefined || spec.notify !== undefined || spec.onSuccess !== undefined || spec.onFailure !== undefined;
}

/**
 * A message in the shard's outbox (notifier.ts): a notification to a URL, or a job to trigger
 * (`chain`, whose `url` is that job's id and `body` empty).
 */
export interface NotificationRow {
  kind: "notify" | "chain";
  id: string;
  jobId: string;
  tenantId: string;
  /**
   * A notification's receiver, sealed (the JSON of its `Sealed`; one written before URLs were
   * sealed holds the URL in clear); a chain's, the chained job's id.
   */
  url: string;
  body: string;
  dueAt: number;
  sends: number;
}

/** A run about to be created. */
export type NewRun = Pick<RunRow, "id" | "jobId" | "jobVersion" | "trigger" | "scheduledAt" | "catchUp">;

/** A recurring job's next fire as the fire that made a run worked it out, carried on that run (fired-through.ts). */
export interface CarriedFire {
  fireAt: number;
  /** The fire plus its jitter: its place in `runs_next`. */
  dueAt: number;
  /** The job's version then: a change of the job makes the entry stale. */
  version: number;
  /** The job's fires counted with this one (`maxRuns`). */
  fires: number;
}

/**
 * A run about to be written: whether it goes into `runs_open` while unfinished (`watchesOpenRuns`);
 * for a workflow step's run, the workflow run it belongs to and its first fence; for the last run
 * of a recurring job's fire, its job's next fire.
 */
export type RunToWrite = NewRun & { watched: boolean; parentRunId?: string; fence?: number; next?: CarriedFire; permit?: string };

export type Row = Record<string, SqlStorageValue>;

export const toJob = (r: Row): ShardJob => ({
  id: r.id as string,
  tenantId: r.tenant_id as string,
  version: r.version as number,
  spec: JSON.parse(r.spec as string) as JobSpec,
  paused: r.paused === 1,
  deleted: r.deleted === 1,
  createdAt: r.created_at as number,
  ...(r.standalone === 1 && { standalone: true }),
  nextFireAt: r.next_fire_at as number | null,
  fires: r.fires as number,
  rateNextAt: r.rate_next_at as number | null,
  failureStreak: r.failure_streak as number,
  dueAt: (r.frequent === 1 ? r.soon_at : r.next_due_at) as number | null,
  frequent: r.frequent === 1,
  firedAt: null,
});

export const toTenant = (r: Row): TenantSettings => ({
  id: r.id as string,
  version: r.version as number,
  signingGeneration: r.signing_generation as number,
  legacySignature: r.legacy_signature !== 0,
  maxRunsInFlight: r.max_in_flight as number | null,
  retentionDays: (r.retention_days as number | null) ?? null,
  notify: typeof r.notify === "string" ? (JSON.parse(r.notify) as Notify) : null,
});

export const toRun = (r: Row): RunRow => ({
  id: r.id as string,
  jobId: r.job_id as string,
  jobVersion: r.job_version as number,
  trigger: r.trigger as RunRow["trigger"],
  scheduledAt: r.scheduled_at as number,
  catchUp: r.catch_up === 1,
  state: r.state as RunState,
  attempt: r.attempt as number,
  fence: r.fence as number,
  dueAt: r.due_at as number | null,
  leaseUntil: (r.lease_until as number | null) ?? null,
  createdAt: r.created_at as number,
  startedAt: r.started_at as number | null,
  finishedAt: r.finished_at as number | null,
  status: r.status as number | null,
  error: r.error as string | null,
  result: r.result as string | null,
  permit: (r.permit as string | null) ?? null,
  redispatches: (r.redispatches as number | null) ?? 0,
  parentRunId: (r.parent_run_id as string | null) ?? null,
});

/** A run row's `a_*` columns, by the names `attempt_log` gives them (as its view maps them). */
const LATEST_ATTEMPT_COLUMNS = {
  attempt: "a_number",
  fence: "a_fence",
  started_at: "a_started_at",
  finished_at: "a_finished_at",
  outcome: "a_outcome",
  status: "a_status",
  error: "a_error",
  completion_token: "a_token",
  late: "a_late",
};

/** The latest attempt a run's row keeps in its `a_*` columns (as `attempt_log` shows it); null before its first. */
export const latestAttemptOf = (r: Row): AttemptRow | null =>
  r.a_fence === null || r.a_fence === undefined
    ? null
    : toAttempt(Object.fromEntries(Object.entries(LATEST_ATTEMPT_COLUMNS).map(([name, column]) => [name, r[column] ?? null])));

/** A row of `attempt_log` (the attempts table, and each run's latest attempt kept on its row). */
export const toAttempt = (r: Row): AttemptRow => ({
  attempt: r.attempt as number,
  fence: r.fence as number,
  startedAt: r.started_at as number,
  finishedAt: r.finished_at as number | null,
  outcome: r.outcome as AttemptRow["outcome"],
  status: r.status as number | null,
  error: r.error as string | null,
  completionToken: r.completion_token as string,
  late: r.late as string | null,
});
