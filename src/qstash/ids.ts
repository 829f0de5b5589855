/**
 * QStash ids of edgecron objects, derived both ways without a lookup. A published message is
 * a one-off job: its message id is the job id's own part behind `msg_`. A schedule's fire is a
 * run of the schedule's job: its message id is the run id's part behind `msg_`. A dead letter's
 * id is its run's id.
 */
const JOB_PART = /^msg_([0-9a-z]{19})$/;
const RUN_PART = /^msg_([0-9a-z]{19}_[0-9A-Za-z-]+)$/;

export const messageIdOfJob = (jobId: string) => `msg_${jobId.slice("job_".length)}`;
export const messageIdOfRun = (runId: string) => `msg_${runId.slice("run_".length)}`;

/** The one-off job a message id names, or null. */
export function jobIdOfMessage(messageId: string): string | null {
  const m = JOB_PART.exec(messageId);
  return m ? `job_${m[1]}` : null;
}

/** The run a schedule's message id names, or null. */
export function runIdOfMessage(messageId: string): string | null {
  const m = RUN_PART.exec(messageId);
  return m ? `run_${m[1]}` : null;
}

/** A schedule id for a schedule created without Upstash-Schedule-Id. */
export function newScheduleId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `scd_${Array.from(bytes, (b) => "0123456789abcdefghijklmnopqrstuvwxyz"[b % 36]).join("")}`;
}
