import { type ChangedEntry, changedSince } from "../catalog/jobs";
import type { SweepState } from "../catalog/sweep-state";
import { MAX_BOUND_PARAMETERS } from "../sql";
import type { Meter } from "./budget";
import { REPAIR_COST, redeliver } from "./repair";

/** Rows read per query of the feed. */
export const CHANGES_PAGE = 1_000;

/**
 * How far behind its own clock the sweep trusts the catalog to be complete. A row's updated_at
 * is the API's clock when it decided the change; the row becomes visible when D1 commits it,
 * up to a request's duration later, and another isolate's clock may be a little off. A row
 * stamped within the margin may still appear behind the cursor, so the cursor never passes
 * `now - margin`: those rows are read again next minute (harmless: applying a version a
 * shard already holds does nothing).
 */
export const CHANGES_MARGIN_MS = 60_000;

export interface ChangesReport {
  compared: number;
  repaired: number;
  /** The feed was read to its end (within the budget). */
  caughtUp: boolean;
}

type Key = { at: number; id: string };
const before = (a: Key, b: Key) => a.at < b.at || (a.at === b.at && a.id < b.id);

/**
 * The change feed: catalog rows changed since the cursor are compared with their shards and
 * re-delivered where the API's own shard call was lost. Spends at most `allowance` of the meter;
 * moves `state.changes` only past rows it finished.
 */
export async function deliverChanges(
  env: Env,
  db: D1Database,
  meter: Meter,
  state: SweepState,
  allowance: { d1: number; calls: number },
  now: number,
): Promise<ChangesReport> {
  const ceiling = { d1: meter.d1Queries + allowance.d1, calls: meter.shardCalls + allowance.calls };
  const left = () => ({ d1: ceiling.d1 - meter.d1Queries, calls: ceiling.calls - meter.shardCalls });
  const report: ChangesReport = { compared: 0, repaired: 0, caughtUp: false };
  const settled: Key = { at: now - CHANGES_MARGIN_MS, id: "" };
  for (;;) {
    // A page is read only if at least its first row can be finished after it.
    const room = left();
    if (room.d1 < 1 + REPAIR_COST.d1 || room.calls < 1 + REPAIR_COST.calls) break;
    const page = await changedSince(db, state.changes, CHANGES_PAGE);
    if (page.length === 0) {
      report.caughtUp = true;
      break;
    }
    const done = affordablePrefix(page, { d1: room.d1 - 1, calls: room.calls });
    for (const [shard, entries] of groupByShard(done)) {
      const client = meter.shard(env, shard);
      const { stale } = await client.compareJobs(entries);
      for (let i = 0; i < stale.length; i += MAX_BOUND_PARAMETERS) {
        report.repaired += await redeliver(db, client, stale.slice(i, i + MAX_BOUND_PARAMETERS));
      }
    }
    report.compared += done.length;
    const last = done[done.length - 1]!;
    const reached: Key = { at: last.updatedAt, id: last.id };
    state.changes = before(reached, settled) ? reached : settled;
    if (done.length < page.length) break;
    if (page.length < CHANGES_PAGE) {
      report.caughtUp = true;
      break;
    }
    // Past the settled line the rest is re-read next minute anyway.
    if (!before(reached, settled)) break;
  }
  return report;
}

/**
 * The longest prefix of the page whose worst case fits `room`: each shard it touches costs a
 * compareJobs call, and each REPAIR_CHUNK of its rows, if all turn out stale, a repair.
 */
function affordablePrefix(page: ChangedEntry[], room: { d1: number; calls: number }): ChangedEntry[] {
  const perShard = new Map<string, number>();
  let d1 = 0;
  let calls = 0;
  let n = 0;
  for (const row of page) {
    const count = perShard.get(row.shard) ?? 0;
    const add =
      count === 0 ? { d1: REPAIR_COST.d1, calls: 1 + REPAIR_COST.calls } : count % MAX_BOUND_PARAMETERS === 0 ? REPAIR_COST : null;
    if (add && (d1 + add.d1 > room.d1 || calls + add.calls > room.calls)) break;
    if (add) {
      d1 += add.d1;
      calls += add.calls;
    }
    perShard.set(row.shard, count + 1);
    n++;
  }
  return page.slice(0, n);
}

function groupByShard(entries: ChangedEntry[]): Map<string, Array<{ id: string; version: number; deleted: boolean }>> {
  const groups = new Map<string, Array<{ id: string; version: number; deleted: boolean }>>();
  for (const e of entries) {
    const group = groups.get(e.shard) ?? [];
    groups.set(e.shard, group);
    group.push({ id: e.id, version: e.version, deleted: e.deleted });
  }
  return groups;
}
