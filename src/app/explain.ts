import { getTenant } from "../catalog/tenants";
import { breakerKey } from "../gate/breaker";
import { scheduledRunId } from "../model/ids";
import { FINAL_STATES } from "../model/run-states";
import type { RunView } from "../protocol/shard-rpc";
import { type Explanation, explainFire, fireAtOrAfter } from "../schedule/explain";
import { gateStub, shardStub } from "../stubs";
import type { Caller } from "./caller";
import { loadJob } from "./jobs";

/** Unfinished runs looked at for the overlap a fire coming now would meet (the newest of them). */
const RECENT_RUNS = 50;

/**
 * GET /v1/jobs/:id/explain: reads what the shard holds about the job and about the fire at or
 * after `at` (its run, if made), then explains it with the shard's own rules (schedule/explain.ts).
 */
export async function explainJob(
  env: Env,
  caller: Caller,
  id: string,
  at: number,
): Promise<Explanation & { jobId: string; at: number; run: RunView | null }> {
  const job = await loadJob(env, caller, id, { includeDeleted: true });
  const stub = shardStub(env, job.shard);
  const scheduledAt = fireAtOrAfter(job.spec.schedule, job.createdAt, at);
  // A workflow's steps may call several origins: the first step's stands for the run here.
  const key = breakerKey(job, job.spec.target ?? job.spec.steps?.[0]?.target ?? null);
  const [runtimes, recent, run, tenant, breakers] = await Promise.all([
    stub.jobRuntimes([id]),
    stub.listRuns(id, RECENT_RUNS),
    scheduledAt === null ? null : stub.getRun(scheduledRunId(id, scheduledAt)),
    getTenant(env.DB, job.tenantId),
    "origin" in key ? gateStub(env, job.tenantId).breakers() : [],
  ]);
  const breaker = "origin" in key ? (breakers.find((b) => b.origin === key.origin) ?? null) : null;
  const runtime = runtimes[0];
  const explanation = explainFire(
    {
      jobId: id,
      spec: job.spec,
      createdAt: job.createdAt,
      paused: job.paused,
      deleted: job.deletedAt !== null,
      tenantLimited: tenant?.limits.maxRunsInFlight != null,
      nextRunAt: runtime?.nextRunAt ?? null,
      completed: runtime?.completed ?? false,
      unfinished: recent.filter((r) => !FINAL_STATES.includes(r.state)).reverse(),
      breaker,
    },
    at,
    Date.now(),
    (t) => scheduledRunId(id, t),
    run,
  );
  return { jobId: id, at, ...explanation, run };
}
