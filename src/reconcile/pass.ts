import { nextShardInUse, purgeTombstones, shardEntries } from "../catalog/jobs";
import type { SweepState } from "../catalog/sweep-state";
import { tenantsOfShard } from "../catalog/tenants";
import { MAX_BOUND_PARAMETERS } from "../sql";
import type { Meter } from "./budget";
import { REPAIR_COST, redeliver } from "./repair";

/** Catalog entries compared per query and per compareJobs call (the shard looks them up in chunks itself). */
export const PASS_PAGE = 1_000;

/** A page read and compared, and its first chunk of stale jobs repaired. */
const PAGE_COST = { d1: 1 + REPAIR_COST.d1, calls: 1 + REPAIR_COST.calls };
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
  /** The pass reached the last shard in this invocation. */
  completed: boolean;
}

/**
 * The consistency pass, resumed where the last invocation left it: shard by shard in name
 * order, every catalog entry compared with its shard and the stale ones re-delivered; then the
 * shard's tenants' settings are re-applied and its alarm re-asserted. Each step is taken only if
 * its worst case fits the meter beside `reserve` queries; a pass completes at most once per
 * invocation, so a small catalog is swept once a minute, as before, and a large one in as
 * many minutes as its size needs (README, "Sizing").
 */
export async function continuePass(
  env: Env,
  db: D1Database,
  meter: Meter,
  state: SweepState,
  reserve: number,
  now: number,
): Promise<PassReport> {
  const report: PassReport = { shards: 0, compared: 0, repaired: 0, shardsThatRanDueWork: 0, purged: 0, completed: false };
  const pass = state.pass;
  const fits = (cost: { d1: number; calls: number }) => meter.affords(cost.d1, cost.calls, reserve);
  if (pass.shard === "") {
    if (!fits({ d1: 1, calls: 0 })) return report;
    const first = await nextShardInUse(db, "");
    if (first === null) {
      // An empty catalog: nothing to compare, and the pass is trivially complete.
      Object.assign(pass, { after: "", startedAt: null, completed: pass.completed + 1 });
      report.completed = true;
      return report;
    }
    Object.assign(pass, { shard: first, after: "", startedAt: now });
  }
  for (;;) {
    const client = meter.shard(env, pass.shard);
    if (pass.after !== DONE) {
      if (!fits(PAGE_COST)) return report;
      const entries = await shardEntries(db, pass.shard, pass.after, PASS_PAGE);
      const { stale, gone } = entries.length > 0 ? await client.compareJobs(entries) : { stale: [], gone: [] };
      report.compared += entries.length;
      let reached = entries.length > 0 ? entries[entries.length - 1]!.id : pass.after;
      for (let i = 0; i < stale.length; i += MAX_BOUND_PARAMETERS) {
        // The first chunk was paid for with the page; a later one that does not fit waits for
        // the next invocation, which compares the page again from just before it.
        if (i > 0 && !fits(REPAIR_COST)) {
          const firstLeft = entries.findIndex((e) => e.id === stale[i]);
          reached = firstLeft > 0 ? entries[firstLeft - 1]!.id : pass.after;
          break;
        }
        report.repaired += await redeliver(db, client, stale.slice(i, i + MAX_BOUND_PARAMETERS));
      }
      // Tombstones whose shard holds nothing more of them go, a statement's worth per page; the
      // rest on the next pass (a tombstone's only use was to keep the job's runs readable).
      if (gone.length > 0 && fits({ d1: 1, calls: 0 })) report.purged += await purgeTombstones(db, gone.slice(0, MAX_BOUND_PARAMETERS));
      pass.after = entries.length < PASS_PAGE && reached === (entries[entries.length - 1]?.id ?? pass.after) ? DONE : reached;
      continue;
    }
    if (!fits(FINISH_COST)) return report;
    await client.applyTenants(await tenantsOfShard(db, pass.shard));
    const { ranDueWork } = await client.assertAlarm();
    if (ranDueWork) report.shardsThatRanDueWork++;
    report.shards++;
    const next = await nextShardInUse(db, pass.shard);
    if (next === null) {
      Object.assign(pass, { shard: "", after: "", startedAt: null, completed: pass.completed + 1 });
      report.completed = true;
      return report;
    }
    Object.assign(pass, { shard: next, after: "" });
  }
}

/**
 * `pass.after` once every entry of the shard was compared and only its tenants and alarm are
 * left. Job ids start with "job_", so no id sorts after it.
 */
const DONE = "~";
