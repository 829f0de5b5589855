import { workerCost } from "../catalog/cost";
import { shardsInUse } from "../catalog/jobs";
import type { ShardMetrics } from "../shard/contract";
import { shardStub } from "../stubs";
import { type Caller, scopeOf } from "./caller";
import { schedulerCost } from "./cost";

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
  const tenantId = scopeOf(caller);
  const shards = await shardsInUse(env.DB, tenantId);
  const all: ShardMetrics[] = await Promise.all(shards.map((s) => shardStub(env, s).metrics(windowMs, tenantId)));
  const sum = (pick: (m: ShardMetrics) => Record<string, number>) => {
    const total: Record<string, number> = {};
    for (const m of all) for (const [k, v] of Object.entries(pick(m))) total[k] = (total[k] ?? 0) + v;
    return total;
  };
  const byOutcome = sum((m) => m.attemptsByOutcome);
  const finished = (byOutcome.succeeded ?? 0) + (byOutcome.failed ?? 0) + (byOutcome.timed_out ?? 0);
  const lags = all.flatMap((m) => m.lagsMs).sort((a, b) => a - b);
  const oldest = all.map((m) => m.oldestAwaitingClaimMs).filter((x): x is number => x !== null);
  return {
    windowMs,
    shards: shards.length,
    runsByState: sum((m) => m.runsByState),
    attempts: { byOutcome, failureRate: finished === 0 ? null : ((byOutcome.failed ?? 0) + (byOutcome.timed_out ?? 0)) / finished },
    fireLagMs: {
      count: lags.length,
      p50: percentile(lags, 50),
      p90: percentile(lags, 90),
      p99: percentile(lags, 99),
      max: lags.at(-1) ?? null,
    },
    outbox: all.reduce((n, m) => n + m.outbox, 0),
    awaitingClaim: all.reduce((n, m) => n + m.awaitingClaim, 0),
    oldestAwaitingClaimMs: oldest.length ? Math.max(...oldest) : null,
    cost: caller.admin
      ? schedulerCost(
          all.map((m) => m.cost),
          await workerCost(env.DB, Date.now() - windowMs),
        )
      : null,
  };
}
