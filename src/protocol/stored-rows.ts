import type { AttemptOutcome } from "../model/attempt-states";
import type { JobSpec, StoredNotify } from "../model/job";
import type { RUN_TRIGGERS, RunState } from "../model/run-states";

/**
 * The shapes a shard stores and hands back whole: a job's definition and runtime, a tenant's
 * settings, a run's row and an attempt's. RunRow and AttemptRow are also the archive's format
 * (src/archive/run-archive.ts), so a field once written must stay readable.
 */

/** What the API (or the sweep) hands a shard: a job definition at a version. */
export interface JobDefinition {
  id: string;
  tenantId: string;
  version: number;
  spec: JobSpec;
  paused: boolean;
  deleted: boolean;
  createdAt: number;
  /**
   * Held by its shard alone, with no catalog row: a QStash message (docs/qstash.md). The API
   * hands it to its shard directly; retention removes it once its run has left. Absent: false.
   */
  standalone?: boolean;
}

/** What a shard knows of a job that the catalog does not: where its schedule stands. */
export interface JobRuntime {
  id: string;
  version: number;
  nextRunAt: number | null;
  /** Nothing is left to fire: a one-off fired, or endAt or maxRuns was reached. */
  completed: boolean;
}

/** What a shard needs to know of a tenant: how to sign its requests and how many may be in flight. */
export interface TenantSettings {
  id: string;
  version: number;
  signingGeneration: number;
  /** Its requests also carry Edgecron-Signature beside -V2; absent (a Worker of an earlier release): on. */
  legacySignature?: boolean;
  maxRunsInFlight: number | null;
  /** Days its finished runs stay before the archive; null or absent (a Worker of an earlier release): the default. */
  retentionDays?: number | null;
  /** Notifications for the tenant's jobs that name none of their own; null or absent: none. */
  notify?: StoredNotify | null;
}

export interface RunRow {
  id: string;
  jobId: string;
  jobVersion: number;
  trigger: (typeof RUN_TRIGGERS)[number];
  scheduledAt: number;
  catchUp: boolean;
  state: RunState;
  attempt: number;
  fence: number;
  dueAt: number | null;
  /** A running attempt's lease: when due_at comes, the run is timed out only if this has passed too. */
  leaseUntil: number | null;
  createdAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  status: number | null;
  error: string | null;
  result: string | null;
  /** The grant key of what this run holds at its tenant's gate while in flight (the tenant's permit, its flow-control group's, or both: src/gate/permit-keys.ts), if any. */
  permit: string | null;
  /** How often the current attempt's dispatch went out again unclaimed (0 on each new attempt). */
  redispatches: number;
  /** A workflow step's run: the workflow run it is a step of (docs/workflows.md); null for any other run. */
  parentRunId: string | null;
}

export interface AttemptRow {
  attempt: number;
  fence: number;
  startedAt: number;
  finishedAt: number | null;
  /** running: the target was called; accepted: it answered 202 and will complete through the API. */
  outcome: AttemptOutcome;
  status: number | null;
  error: string | null;
  completionToken: string;
  late: string | null;
}
