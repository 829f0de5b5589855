import type { RunRow } from "../protocol/stored-rows";
import type { ShardJob } from "./rows";

/** Whether a job's runs may go on: pure rules the ledger, firing, admission and workflows share. */

/** Why nothing more may run for this job, or null when it is live. */
export function stoppedReason(job: Pick<ShardJob, "paused" | "deleted"> | null): string | null {
  if (!job || job.deleted) return "job deleted";
  return job.paused ? "job paused" : null;
}

/**
 * Why nothing more may run for this run: a workflow's step goes on while its job is paused (the
 * steps in flight finish, with their retries), and ends only with the job.
 */
export function stoppedFor(run: Pick<RunRow, "parentRunId">, job: Pick<ShardJob, "paused" | "deleted"> | null): string | null {
  const stopped = stoppedReason(job);
  return run.parentRunId !== null && stopped === "job paused" ? null : stopped;
}
