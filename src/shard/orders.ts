import { stepOfRun } from "../model/ids";
import type { StoredTarget } from "../model/job";
import type { RunOrder } from "../protocol/queue-messages";
import type { RunRow, TenantSettings } from "../protocol/stored-rows";
import { stepPolicy } from "../workflow/steps";
import type { ShardJob } from "./rows";

/** How the consumer signs a tenant's requests, as this shard last heard (a tenant it never heard of: generation 1, both schemes). */
export function signingOf(tenant: TenantSettings | null | undefined): Pick<RunOrder, "signingGeneration" | "legacySignature"> {
  return { signingGeneration: tenant?.signingGeneration ?? 1, ...(tenant?.legacySignature === false && { legacySignature: false }) };
}

/**
 * A leased attempt's order: what the consumer needs to call the target once, built by the
 * transaction that leases it, from the run as that transaction wrote it (its attempt and fence),
 * the job as it is now, and the tenant's signing as this shard last heard it (signingOf).
 */
export function runOrder(
  run: Pick<RunRow, "id" | "fence" | "jobId" | "attempt" | "scheduledAt">,
  job: Pick<ShardJob, "tenantId" | "spec">,
  target: StoredTarget,
  signing: Pick<RunOrder, "signingGeneration" | "legacySignature">,
  completionToken: string,
  input: string | null,
  leaseUntil: number | null,
): RunOrder {
  const step = stepOfRun(run.id);
  return {
    runId: run.id,
    fence: run.fence,
    jobId: run.jobId,
    tenantId: job.tenantId,
    ...signing,
    attempt: run.attempt,
    scheduledAt: run.scheduledAt,
    target,
    timeoutMs: stepPolicy(job.spec, run.id).timeoutMs,
    completionToken,
    ...(step && { step, ...(input !== null && { input }) }),
    ...(leaseUntil !== null && { leaseUntil }),
  };
}
