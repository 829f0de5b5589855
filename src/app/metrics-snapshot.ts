import { shardsInUse } from "../catalog/shards";
import type { Breaker } from "../gate/breaker";
import { DEFAULT_TENANT } from "../model/ids";
import { addLags, type LagCounts, noLags } from "../protocol/alarm-lag";
import type { ShardCost, ShardMetrics } from "../protocol/shard-rpc";
import { addTotals, noTotals, type ShardTotals } from "../protocol/totals";
import { gateStub, shardStub } from "../stubs";
import { type Caller, scopeOf } from "./caller";

/** What the shards in the caller's scope report for a window, added up. */
export interface MetricsSnapshot {
  windowMs: number;
  shards: number;
  runsByState: Record<string, number>;
  attemptsByOutcome: Record<string, number>;
  /** Ascending; up to the shards' sample limit each (src/shard/views.ts). */
  lagsMs: number[];
  /** Of whole shards, whatever the scope: shards do not count it per tenant. */
  outbox: number;
  awaitingClaim: number;
  oldestAwaitingClaimMs: number | null;
  /** Of whole shards, whatever the scope: their meters are not kept per tenant. */
  shardCosts: ShardCost[];
  /** Shard objects constructed in the window; of whole shards, like `shardCosts`. */
  shardStarts: number;
  /** How late the shards' alarms started in the window, bucketed by each shard; of whole shards too. */
  alarmLag: LagCounts;
  /** The shards' writes to the run archive: how many shards are failing, the longest run of failures, the earliest retry. Of whole shards. */
  archive: { failingShards: number; consecutiveFailures: number; nextRetryAt: number | null };
  /** The circuit breakers of the caller's tenant (the admin's: `default`) that are not plainly closed. */
  breakers: Breaker[];
  /** How often those breakers moved to each state, since their gate was created. */
  breakerTransitions: Record<string, number>;
  /** The shards' counters since each was created, added up; of whole shards, like `shardCosts`. */
  totals: ShardTotals;
}

/** Asks every shard in use (a tenant key: its own shards, for its own runs) for the window's figures. */
export async function collectMetrics(env: Env, caller: Caller, windowMs: number): Promise<MetricsSnapshot> {
  const tenantId = scopeOf(caller);
  const shards = await shardsInUse(env.DB, tenantId);
  const [all, { breakers, transitions }] = await Promise.all([
    Promise.all(shards.map((s): Promise<ShardMetrics> => shardStub(env, s).metrics(windowMs, tenantId))),
    gateStub(env, tenantId ?? DEFAULT_TENANT).breakerFigures(),
  ]);
  const sum = (pick: (m: ShardMetrics) => Record<string, number>) => {
    const total: Record<string, number> = {};
    for (const m of all) for (const [k, v] of Object.entries(pick(m))) total[k] = (total[k] ?? 0) + v;
    return total;
  };
  const alarmLag = noLags();
  for (const m of all) addLags(alarmLag, m.durableObject.alarmLag);
  const oldest = all.map((m) => m.oldestAwaitingClaimMs).filter((x): x is number => x !== null);
  const failing = all.map((m) => m.archive).filter((a) => a.consecutiveFailures > 0);
  const retries = failing.map((a) => a.nextRetryAt).filter((x): x is number => x !== null);
  return {
    windowMs,
    shards: shards.length,
    runsByState: sum((m) => m.runsByState),
    attemptsByOutcome: sum((m) => m.attemptsByOutcome),
    lagsMs: all.flatMap((m) => m.lagsMs).sort((a, b) => a - b),
    outbox: all.reduce((n, m) => n + m.outbox, 0),
    awaitingClaim: all.reduce((n, m) => n + m.awaitingClaim, 0),
    oldestAwaitingClaimMs: oldest.length ? Math.max(...oldest) : null,
    shardCosts: all.map((m) => m.cost),
    shardStarts: all.reduce((n, m) => n + m.durableObject.starts, 0),
    alarmLag,
    archive: {
      failingShards: failing.length,
      consecutiveFailures: Math.max(0, ...failing.map((a) => a.consecutiveFailures)),
      nextRetryAt: retries.length ? Math.min(...retries) : null,
    },
    breakers,
    breakerTransitions: transitions,
    // A shard of an older release, mid-deploy, answers without totals: it adds nothing.
    totals: all.reduce((sum, m) => (m.totals ? addTotals(sum, m.totals) : sum), noTotals()),
  };
}
