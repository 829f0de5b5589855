import type { JobSpec } from "../model/job";
import type { RunRow, TenantSettings } from "../protocol/stored-rows";
import type { ShardJob } from "./rows";

/**
 * Flow control a shard decides alone: a job's `maxConcurrency` (its runs dispatched or running)
 * and `ratePerSecond` (runs admitted no closer together than 1/rate). The tenant's
 * runs-in-flight limit spans shards and is its gate's to decide, for the candidates this plan
 * leaves. Pure: the shard supplies the counts and applies the plan.
 */
export interface AdmissionPlan {
  /** May start as far as their jobs are concerned, oldest fire first. */
  candidates: RunRow[];
  /** Must wait; `dueAt` is when the shard looks again (a run ending looks sooner). */
  deferred: Array<{ run: RunRow; dueAt: number }>;
}

type AdmissionJob = Pick<ShardJob, "spec" | "rateNextAt" | "paused" | "deleted">;

/**
 * `stoppedFor` is the ledger's rule of which runs a pause or delete ends (ledger.ts), passed in
 * rather than imported (the ledger imports this module): admission must agree with it, since a
 * run it leaves out and the ledger does not cancel stays due with nothing to move it, and its
 * due time, past, would start the alarm over and over (a paused workflow's step held by a
 * breaker did).
 */
export function planAdmission(
  waiting: readonly RunRow[],
  jobs: ReadonlyMap<string, AdmissionJob>,
  inFlight: (jobId: string) => number,
  now: number,
  recheckMs: number,
  stoppedFor: (run: RunRow, job: AdmissionJob | null) => string | null,
): AdmissionPlan {
  const plan: AdmissionPlan = { candidates: [], deferred: [] };
  const counts = new Map<string, number>();
  const rateTaken = new Set<string>();
  for (const run of waiting) {
    const job = jobs.get(run.jobId);
    // The alarm cancels these. A paused job's workflow steps under way are not among them: they go on.
    if (!job || stoppedFor(run, job) !== null) continue;
    // A workflow's step (a breaker held it) is part of a run flow control already let through,
    // and that run's permit covers it: it starts with no limit of its job's or its tenant's.
    if (run.parentRunId !== null) {
      plan.candidates.push(run);
      continue;
    }
    const { maxConcurrency, ratePerSecond } = job.spec;
    // Counted only for a job that has a maxConcurrency: one query per job adds up over a backlog.
    const count = counts.get(run.jobId) ?? (maxConcurrency === undefined ? 0 : inFlight(run.jobId));
    if (maxConcurrency !== undefined && count >= maxConcurrency) {
      plan.deferred.push({ run, dueAt: now + recheckMs });
      continue;
    }
    if (ratePerSecond !== undefined) {
      const spacing = 1000 / ratePerSecond;
      if (rateTaken.has(run.jobId)) {
        plan.deferred.push({ run, dueAt: now + spacing });
        continue;
      }
      if (job.rateNextAt !== null && job.rateNextAt > now) {
        plan.deferred.push({ run, dueAt: job.rateNextAt });
        continue;
      }
      rateTaken.add(run.jobId);
    }
    counts.set(run.jobId, count + 1);
    plan.candidates.push(run);
  }
  return plan;
}

/**
 * Whether a job's runs go into `runs_open`, the index of each job's unfinished runs: only the
 * overlap policies, maxConcurrency and flow control ask for them while the job runs. Other
 * jobs' runs stay out of it, a row written less per run (docs/cost.md); pause and delete find
 * those through the runs that are due.
 */
export function watchesOpenRuns(
  spec: Pick<JobSpec, "overlap" | "maxConcurrency" | "ratePerSecond" | "flowControl">,
  tenant: Pick<TenantSettings, "maxRunsInFlight"> | null,
): boolean {
  return (spec.overlap ?? "allow") !== "allow" || underFlowControl(spec, tenant);
}

/** Runs of this job wait for admission: its own limits, its flow-control group's, or its tenant's runs-in-flight limit. */
export function underFlowControl(
  spec: Pick<JobSpec, "maxConcurrency" | "ratePerSecond" | "flowControl">,
  tenant: Pick<TenantSettings, "maxRunsInFlight"> | null,
): boolean {
  return (
    spec.maxConcurrency !== undefined ||
    spec.ratePerSecond !== undefined ||
    spec.flowControl !== undefined ||
    (tenant?.maxRunsInFlight ?? null) !== null
  );
}
