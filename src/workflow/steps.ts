import { stepOfRun } from "../model/ids";
import type { JobSpec, StoredStep, StoredTarget } from "../model/job";
import type { StepStatus } from "./graph";

/**
 * How a workflow job's steps map onto the shard's runs (docs/workflows.md): each step of a run
 * is a run of its own (`stepRunId`), so dispatch, claim, fencing, leases, retries, 202
 * completion and heartbeats apply to it unchanged. Pure: the shard reads and writes the rows.
 */

/** The step a step run executes, or null for any other run (or a step the job no longer has). */
function stepOf(spec: Pick<JobSpec, "steps">, runId: string): StoredStep | null {
  const ids = stepOfRun(runId);
  if (!ids || !spec.steps) return null;
  return spec.steps.find((s) => s.id === ids.stepId) ?? null;
}

/** What a run calls: its step's target for a step run, else the job's; null for a workflow run itself. */
export function targetOfRun(spec: Pick<JobSpec, "steps" | "target">, runId: string): StoredTarget | null {
  if (stepOfRun(runId)) return stepOf(spec, runId)?.target ?? null;
  return spec.target ?? null;
}

/** A run of this job that is a workflow run (it runs steps, not a target of its own). */
export function isWorkflowRun(spec: Pick<JobSpec, "steps">, runId: string): boolean {
  return spec.steps !== undefined && stepOfRun(runId) === null;
}

/** The step's timeout and retry policy: its own, else the job's. */
export function stepPolicy(spec: Pick<JobSpec, "steps" | "timeoutMs" | "retry">, runId: string) {
  const step = stepOf(spec, runId);
  return { timeoutMs: step?.timeoutMs ?? spec.timeoutMs, retry: step?.retry ?? spec.retry };
}

/**
 * Why a step ended skipped, kept as its error: the graph needs to know whether something above
 * it failed (an any_failed step below it still sees that failure) or its condition simply did
 * not hold.
 */
export const SKIPPED_UPSTREAM_FAILED = "skipped: a step it depends on failed or was skipped";
export const SKIPPED_CONDITION = "skipped: its condition (when) did not hold";

/** A step run's state as the graph sees it; a cancelled step (its job deleted) counts as failed. */
export function statusOfStepRun(row: { state: string; error: string | null }): StepStatus {
  switch (row.state) {
    case "succeeded":
      return { state: "succeeded" };
    case "failed":
    case "dead":
    case "cancelled":
      return { state: "failed" };
    case "skipped":
      return { state: "skipped", upstreamFailed: row.error === SKIPPED_UPSTREAM_FAILED };
    default:
      return { state: "active" };
  }
}

/** Most of a step's result kept: its response body, or its 202 completion's `result`. */
export const MAX_RESULT_BYTES = 64 * 1024;

/** A result as steps below receive it and the API shows it: JSON when it parses, else the text. */
export function resultValue(result: string | null): unknown {
  if (result === null) return null;
  try {
    return JSON.parse(result);
  } catch {
    return result;
  }
}

/** The body a step without one of its own is sent: the run and its parents' results. */
export function upstreamInput(
  runId: string,
  scheduledAt: number,
  parents: ReadonlyArray<{ stepId: string; result: string | null }>,
): string {
  const upstream: Record<string, unknown> = {};
  for (const p of parents) upstream[p.stepId] = resultValue(p.result);
  return JSON.stringify({ runId, scheduledAt: new Date(scheduledAt).toISOString(), upstream });
}
