import { expireDedup } from "../catalog/qstash";
import { readSweepState, type SweepRepairKind, writeSweepState } from "../catalog/sweep-state";
import { retireAudit } from "./audit-retention";
import { Meter, SWEEP_BUDGET, type SweepBudget } from "./budget";
import { deliverChanges } from "./changes";
import { continuePass } from "./pass";
import { resealTargets } from "./resealing";
import { deleteOrphanSchedules } from "./schedule-orphans";
import { sealOldTargets } from "./sealing";

export interface SweepReport {
  /** Shards the consistency pass finished in this invocation (tenants re-applied, alarm re-asserted). */
  shards: number;
  jobsCompared: number;
  jobsRepaired: number;
  shardsThatRanDueWork: number;
  /** Tombstones of deleted jobs removed from the catalog once their shard held nothing more of them. */
  tombstonesPurged: number;
  targetsSealed: number;
  /** Targets sealed again under the current key after a rotation of ENCRYPTION_KEYS. */
  targetsResealed: number;
  /** Audit entries past their retention, archived and removed from D1. */
  auditRetired: number;
  /** QStash deduplication ids past their window, removed (publishes remove their own share too). */
  dedupExpired: number;
  /** Jobs of QStash schedules that no schedule id named (an upsert that died between its steps), deleted. */
  orphanSchedulesDeleted: number;
  /** Rows of the change feed compared in this invocation. */
  changesCompared: number;
  changesCaughtUp: boolean;
  /** Shards whose call threw in this invocation, skipped (the next pass tries them again). */
  failedShards: string[];
  /** The consistency pass reached its end in this invocation; `passesCompleted` counts them all. */
  passCompleted: boolean;
  passesCompleted: number;
  /** Where the pass stands for the next invocation. */
  passShard: string;
  d1Queries: number;
  shardCalls: number;
  /** From the invocation's start to its state write, on the Worker's clock (which moves at I/O only). */
  durationMs: number;
}

/** The state write at the end is always paid for. */
const STATE_WRITE = 1;

/** Expired QStash deduplication ids removed per invocation, by a range of their expiry index. */
const DEDUP_EXPIRED_PER_SWEEP = 1_000;

/**
 * The reconciliation sweep (the cron trigger), doing a bounded part of the work per invocation
 * whatever the catalog's size (SWEEP_BUDGET):
 * - the change feed: jobs created (found by id) or changed (found through jobs_changed) since
 *   the last invocation are compared with their shards and re-delivered where the API's shard
 *   call was lost (a crash between the D1 write and the shard call loses nothing), within a
 *   minute or two;
 * - the consistency pass, resumed from where the last invocation stopped: every shard's
 *   tenants' settings re-applied (a rotation or limit change it missed) and its alarm
 *   re-asserted (alarms can be lost or late), then every job compared with its shard, by id;
 * - until none is left, the sealing of targets stored in clear before sealing, and after a
 *   rotation of ENCRYPTION_KEYS, the re-sealing of targets under the new key (resealing.ts);
 * - the audit log's retention: entries past it archived and removed (audit-retention.ts);
 * - QStash deduplication ids past their ten-minute window, removed (a bounded range delete);
 * - jobs of QStash schedules that no schedule id names, deleted (schedule-orphans.ts).
 * A shard whose call throws is skipped and counted (state.shardFailures), never the end of the
 * invocation: the rest is repaired, the state written, and the next pass calls that shard again.
 * Its place is kept in D1 (sweep_state), read once and written once per invocation.
 */
export async function sweep(env: Env, budget: SweepBudget = SWEEP_BUDGET): Promise<SweepReport> {
  const meter = new Meter(budget);
  const db = meter.d1(env.DB);
  const now = Date.now();
  const state = await readSweepState(db);
  const targetsSealed = await sealOldTargets(env, db, meter, state, STATE_WRITE);
  const targetsResealed = await resealTargets(env, db, meter, state, STATE_WRITE);
  // A small share: in the steady state it spends one query.
  const auditRetired = await retireAudit(env, db, meter, state, Math.floor((meter.d1Left - STATE_WRITE) / 5), now);
  // One query: what publishes left behind (a tenant that stopped publishing) goes within the hour.
  const dedupExpired = meter.affords(1, 0, STATE_WRITE) ? await expireDedup(db, now, DEDUP_EXPIRED_PER_SWEEP) : 0;
  // Before the feed, which then hands the deletions to their shards.
  const orphanSchedulesDeleted = await deleteOrphanSchedules(db, meter, state, STATE_WRITE, now);
  // The feed may take half of what is left, so the pass always moves on.
  const changes = await deliverChanges(
    env,
    db,
    meter,
    state,
    { d1: Math.floor((meter.d1Left - STATE_WRITE) / 2), calls: Math.floor(meter.callsLeft / 2) },
    now,
  );
  const pass = await continuePass(env, db, meter, state, STATE_WRITE, now);
  const repairs: Record<SweepRepairKind, number> = {
    feed_job: changes.repaired,
    pass_job: pass.repaired,
    due_work: pass.shardsThatRanDueWork,
  };
  const failedShards = [...new Set([...changes.failed, ...pass.failed])].sort();
  // Kept with the sweep's place, in its one write: the last invocation's figures cost no query.
  state.last = { startedAt: now, durationMs: Date.now() - now, repairs, failedShards: failedShards.length };
  state.shardFailures += failedShards.length;
  await writeSweepState(db, state);
  return {
    shards: pass.shards,
    jobsCompared: pass.compared,
    jobsRepaired: changes.repaired + pass.repaired,
    shardsThatRanDueWork: pass.shardsThatRanDueWork,
    tombstonesPurged: pass.purged,
    targetsSealed,
    targetsResealed,
    auditRetired,
    dedupExpired,
    orphanSchedulesDeleted,
    changesCompared: changes.compared,
    changesCaughtUp: changes.caughtUp,
    failedShards,
    passCompleted: pass.completed,
    passesCompleted: state.pass.completed,
    passShard: state.pass.shard,
    d1Queries: meter.d1Queries,
    shardCalls: meter.shardCalls,
    durationMs: state.last.durationMs,
  };
}
