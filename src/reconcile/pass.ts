import { jobsAfter } from "../catalog/jobs";
import { nextShardInUse } from "../catalog/shards";
import { PAST_SHARDS, type SweepState } from "../catalog/sweep-state";
import { tenantsOfShard } from "../catalog/tenants";
import type { Meter } from "./budget";
import { ShardComparer } from "./comparer";

/**
 * Catalog rows read per query of the pass (an id, a shard, a version and a flag each). What an
 * invocation reads waits in memory until its shard is called, mostly at the end: at 1,000 rows a
 * query the budget's 250 queries hold at most about 250,000 entries (some 30 MB of the isolate's
 * 128 MB); a larger page would save queries at the risk of the memory limit.
 */
const PASS_PAGE = 1_000;

/** A shard finished: its tenants read and re-applied, its alarm re-asserted, the next shard found. */
const FINISH_COST = { d1: 2, calls: 2 };

export interface PassReport {
  /** Shards finished (tenants re-applied, alarm re-asserted) by this invocation. */
  shards: number;
  compared: number;
  repaired: number;
  shardsThatRanDueWork: number;
  /** Tombstones of deleted jobs removed from the catalog. */
  purged: number;
  /** Shards whose call threw, skipped until the next pass (at most once each). */
  failed: Set<string>;
  /** The pass reached its end in this invocation. */
  completed: boolean;
}

/**
 * The consistency pass, resumed where the last invocation left it. First shard by shard, in name
 * order, from the registry of shards in use: the shard's tenants' settings re-applied and its
 * alarm re-asserted. Then every job of the catalog, by id, compared with its shard and re-delivered
 * where the shard lacks its latest version; the jobs are grouped by shard over all the pages an
 * invocation reads (ShardComparer), so that a shard costs about a call per invocation, not one per
 * page. Each step is taken only if its worst case fits the meter beside `reserve` queries; a pass
 * completes at most once per invocation, so a small catalog is swept once a minute and a large one
 * in as many minutes as its size needs (docs/sizing-and-throughput.md, "The sweep's timing").
 */
export async function continuePass(
  env: Env,
  db: D1Database,
  meter: Meter,
  state: SweepState,
  reserve: number,
  now: number,
): Promise<PassReport> {
  const report: PassReport = {
    shards: 0,
    compared: 0,
    repaired: 0,
    shardsThatRanDueWork: 0,
    purged: 0,
    failed: new Set(),
    completed: false,
  };
  const pass = state.pass;
  const fits = (cost: { d1: number; calls: number }) => meter.affords(cost.d1, cost.calls, reserve);
  if (pass.shard === "") {
    if (!fits({ d1: 1, calls: 0 })) return report;
    // No shard in use: no job was ever created, and the pass goes straight to the (empty) jobs.
    Object.assign(pass, { shard: (await nextShardInUse(db, "")) ?? PAST_SHARDS, after: "", startedAt: now });
  }
  while (pass.shard !== PAST_SHARDS) {
    if (!fits(FINISH_COST)) return report;
    const client = meter.shard(env, pass.shard);
    const tenants = await tenantsOfShard(db, pass.shard);
    try {
      await client.applyTenants(tenants);
      const { ranDueWork } = await client.assertAlarm();
      if (ranDueWork) report.shardsThatRanDueWork++;
      report.shards++;
    } catch (err) {
      // One shard that throws (a bug, an overloaded object) must not hold every other shard's
      // repair: it is skipped, counted, and the next pass tries it again.
      report.failed.add(pass.shard);
      console.error(`sweep: shard ${pass.shard} failed; skipped until the next pass`, err);
    }
    Object.assign(pass, { shard: (await nextShardInUse(db, pass.shard)) ?? PAST_SHARDS, after: "" });
  }
  const comparer = new ShardComparer(env, db, meter, { d1: meter.budget.d1Queries - reserve, calls: meter.budget.shardCalls });
  let reached = pass.after;
  let ended = false;
  while (comparer.roomForPage) {
    const page = await jobsAfter(db, reached, PASS_PAGE);
    const taken = await comparer.take(page);
    if (taken > 0) reached = page[taken - 1]!.id;
    if (taken < page.length) break;
    if (page.length < PASS_PAGE) {
      ended = true;
      break;
    }
  }
  const result = await comparer.finish();
  Object.assign(report, { compared: result.compared, repaired: result.repaired, purged: result.purged });
  for (const shard of result.failed) report.failed.add(shard);
  const stop = result.unrepaired[0];
  if (stop !== undefined) {
    // Compared again from just before it next time; never behind where this invocation began.
    const before = stop.id.slice(0, -1);
    if (before > pass.after) pass.after = before;
  } else if (ended) {
    Object.assign(pass, { shard: "", after: "", startedAt: null, completed: pass.completed + 1 });
    report.completed = true;
  } else {
    pass.after = reached;
  }
  return report;
}
