import { stepOfRun } from "../model/ids";
import type { StoredTarget } from "../model/job";
import { stepPolicy } from "../workflow/steps";
import type { RunOrder, RunRow } from "./contract";
import type { ShardJob } from "./rows";

/**
 * A leased attempt's order: what the consumer needs to call the target once, built by the
 * transaction that leases it, from the run as that transaction wrote it (its attempt and fence),
 * the job as it is now, and the tenant's signing generation as this shard last heard it.
 */
export function runOrder(
  run: Pick<RunRow, "id" | "fence" | "jobId" | "attempt" | "scheduledAt">,
  job: Pick<ShardJob, "tenantId" | "spec">,
  target: StoredTarget,
  signingGeneration: number,
  completionToken: string,
  input: string | null,
): RunOrder {
  const step = stepOfRun(run.id);
  return {
    runId: run.id,
    fence: run.fence,
    jobId: run.jobId,
    tenantId: job.tenantId,
    signingGeneration,
    attempt: run.attempt,
    scheduledAt: run.scheduledAt,
    target,
    timeoutMs: stepPolicy(job.spec, run.id).timeoutMs,
    completionToken,
    ...(step && { step, ...(input !== null && { input }) }),
  };
}
