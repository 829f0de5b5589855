import { workerCost } from "../catalog/cost";
import { readSweepState } from "../catalog/sweep-state";
import { TOTALS_OBJECT } from "../gate/sign-in-names";
import { signInStub } from "../stubs";
import type { Caller } from "./caller";
import { gateCosts, schedulerCost } from "./cost";
import { collectMetrics } from "./metrics-snapshot";
import { renderExposition } from "./prometheus";
import { schedulerSeries } from "./prometheus-series";

/** Nearest-rank percentile of an ascending array; null when empty. */
export function percentile(sorted: number[], p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/**
 * Scheduler health over every shard in use (a tenant's own runs only, for a tenant key), and,
 * for the admin, what the window cost: the meters count the whole scheduler, not one tenant.
 */
export async function schedulerMetrics(env: Env, caller: Caller, windowMs: number) {
  const m = await collectMetrics(env, caller, windowMs);
  const byOutcome = m.attemptsByOutcome;
  const finished = (byOutcome.succeeded ?? 0) + (byOutcome.failed ?? 0) + (byOutcome.timed_out ?? 0);
  const lags = m.lagsMs;
  return {
    windowMs,
    shards: m.shards,
    runsByState: m.runsByState,
    attempts: { byOutcome, failureRate: finished === 0 ? null : ((byOutcome.failed ?? 0) + (byOutcome.timed_out ?? 0)) / finished },
    fireLagMs: {
      count: lags.length,
      p50: percentile(lags, 50),
      p90: percentile(lags, 90),
      p99: percentile(lags, 99),
      max: lags.at(-1) ?? null,
    },
    outbox: m.outbox,
    awaitingClaim: m.awaitingClaim,
    oldestAwaitingClaimMs: m.oldestAwaitingClaimMs,
    archive: {
      failingShards: m.archive.failingShards,
      consecutiveFailures: m.archive.consecutiveFailures,
      nextRetryAt: m.archive.nextRetryAt === null ? null : new Date(m.archive.nextRetryAt).toISOString(),
    },
    cost: caller.admin
      ? schedulerCost(m.shardCosts, await workerCost(env.DB, Date.now() - windowMs), await gateCosts(env, windowMs))
      : null,
  };
}

/**
 * The same figures in Prometheus's text format (prometheus-series.ts says which). The admin also
 * gets what only exists scheduler-wide: the outbox, the window's cost and calls, the shards' starts and
 * alarm lag, the sweep's progress and last invocation.
 */
export async function schedulerExposition(env: Env, caller: Caller, windowMs: number): Promise<string> {
  const snapshot = await collectMetrics(env, caller, windowMs);
  const admin = caller.admin
    ? {
        cost: schedulerCost(snapshot.shardCosts, await workerCost(env.DB, Date.now() - windowMs), await gateCosts(env, windowMs)),
        sweep: await readSweepState(env.DB),
        signInRefusals: await signInStub(env, TOTALS_OBJECT).totals(),
      }
    : null;
  return renderExposition(schedulerSeries(snapshot, admin));
}
