import type { CatalogJob } from "../catalog/jobs";
import { chainedFromOf } from "../model/ids";
import type { Job, StepView, TargetView } from "../model/job";
import type { Run } from "../model/run";
import type { RunView } from "../protocol/shard-rpc";
import type { AttemptRow } from "../protocol/stored-rows";
import { describeSchedule } from "../schedule/describe";
import { resultValue } from "../workflow/steps";

const iso = (ms: number) => new Date(ms).toISOString();
const isoOrNull = (ms: number | null) => (ms === null ? null : iso(ms));

/** A job as the API shows it: the catalog's definition, its sealed parts as shown, and the shard's runtime view. */
export function presentJob(
  job: CatalogJob,
  shown: { target?: TargetView; steps?: StepView[]; notify?: Job["notify"] },
  runtime: { nextRunAt: number | null; completed: boolean } | undefined,
): Job {
  const nextRunAt = runtime?.nextRunAt ?? null;
  // Who set its chains is the fire-time check's (src/app/chains.ts), not part of the definition.
  const { chainPrefixes: _, ...spec } = job.spec;
  return {
    id: job.id,
    tenantId: job.tenantId,
    name: job.name,
    ...spec,
    description: describeSchedule(job.spec.schedule),
    target: shown.target,
    steps: shown.steps,
    notify: shown.notify,
    paused: job.paused,
    pausedReason: job.pausedReason,
    completed: runtime?.completed ?? false,
    version: job.version,
    shard: job.shard,
    createdAt: iso(job.createdAt),
    updatedAt: iso(job.updatedAt),
    nextRunAt: job.paused ? null : isoOrNull(nextRunAt),
  };
}

/** A run from its shard (RunView) or from the archive (its attempts without completion tokens). */
export function presentRun(run: Omit<RunView, "attemptLog"> & { attemptLog?: Array<Omit<AttemptRow, "completionToken">> }): Run {
  return {
    id: run.id,
    jobId: run.jobId,
    jobVersion: run.jobVersion,
    // A chained run is stored as a manual one; its id names the run that triggered it (src/model/ids.ts).
    ...chainOf(run.id, run.trigger),
    scheduledAt: iso(run.scheduledAt),
    catchUp: run.catchUp,
    state: run.state,
    attempts: run.attempts,
    startedAt: isoOrNull(run.startedAt),
    finishedAt: isoOrNull(run.finishedAt),
    status: run.status,
    error: run.error,
    result: run.result,
    ...(run.attemptLog && { attemptLog: run.attemptLog.map(presentAttempt) }),
    ...(run.steps && {
      steps: run.steps.map((step) => ({
        id: step.id,
        state: step.state,
        attempt: step.attempt,
        status: step.status,
        startedAt: isoOrNull(step.startedAt),
        finishedAt: isoOrNull(step.finishedAt),
        ...(step.result !== null && { result: resultValue(step.result) }),
        error: step.error,
        attemptLog: step.attemptLog.map(presentAttempt),
      })),
    }),
  };
}

function chainOf(runId: string, stored: RunView["trigger"]): Pick<Run, "trigger" | "chainedFrom"> {
  const from = chainedFromOf(runId);
  return from === null ? { trigger: stored } : { trigger: "chain", chainedFrom: from };
}

function presentAttempt(a: Omit<AttemptRow, "completionToken">) {
  return {
    attempt: a.attempt,
    startedAt: iso(a.startedAt),
    finishedAt: isoOrNull(a.finishedAt),
    outcome: a.outcome,
    status: a.status,
    error: a.error,
    durationMs: a.finishedAt === null ? null : a.finishedAt - a.startedAt,
    late: a.late,
  };
}
