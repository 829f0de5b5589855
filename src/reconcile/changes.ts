import { type ChangedEntry, changedSince, firstIdAt, instantOfId, jobsAfter, type ShardEntry } from "../catalog/jobs";
import type { SweepState } from "../catalog/sweep-state";
import type { Meter } from "./budget";
import { type Ceiling, ShardComparer } from "./comparer";

/** Rows read per query of the feed. */
const CHANGES_PAGE = 1_000;

/**
 * How far behind its own clock the sweep trusts the catalog to be complete. A job's id holds the
 * API's clock when it created the job, and a change's updated_at the API's clock when it decided
 * the change; the row becomes visible when D1 commits it, up to a request's duration later, and
 * another isolate's clock may be a little off. A row stamped within the margin may still appear
 * behind a cursor, so neither cursor passes `now - margin`: those rows are read again next minute
 * (harmless: applying a version a shard already holds does nothing).
 */
export const CHANGES_MARGIN_MS = 60_000;

export interface ChangesReport {
  compared: number;
  repaired: number;
  /** Both parts of the feed were read to their end (within the budget). */
  caughtUp: boolean;
  /** Shards whose call threw: their entries are left to the next consistency pass. */
  failed: Set<string>;
}

/** An entry of the feed, with the part of it that read it. */
type FeedEntry = (ShardEntry & { part: "created" }) | (ChangedEntry & { part: "changed" });

/**
 * One part of the feed, read page by page from its cursor: new jobs by id (a job's id starts with
 * its creation instant), or changed jobs by (updated_at, id) through jobs_changed, which holds
 * only jobs changed since their creation. Creating a job writes nothing for the feed.
 */
interface Part<K> {
  read(after: K): Promise<FeedEntry[]>;
  key(entry: FeedEntry): K;
  before(a: K, b: K): boolean;
  /** A key just before `key`, so that a cursor set to it reads `key` again. */
  justBefore(key: K): K;
  /** Where the cursor may go at most: keys stamped within the margin may still be followed by late commits. */
  settled: K;
  /** The instant the cursor stands at: the part further behind reads first. */
  since: number;
  cursor: K;
  reached: K;
  ended: boolean;
  done: boolean;
}

function part<K>(spec: Pick<Part<K>, "read" | "key" | "before" | "justBefore" | "settled" | "cursor" | "since">): Part<K> {
  return { ...spec, reached: spec.cursor, ended: false, done: false };
}

/**
 * The change feed: jobs created or changed since its cursors are compared with their shards and
 * re-delivered where the API's own shard call was lost. Spends at most `allowance` of the meter;
 * moves each cursor only past entries it finished.
 */
export async function deliverChanges(
  env: Env,
  db: D1Database,
  meter: Meter,
  state: SweepState,
  allowance: Ceiling,
  now: number,
): Promise<ChangesReport> {
  const ceiling = { d1: meter.d1Queries + allowance.d1, calls: meter.shardCalls + allowance.calls };
  const comparer = new ShardComparer<FeedEntry>(env, db, meter, ceiling);
  const created = part<string>({
    read: async (after) => (await jobsAfter(db, after, CHANGES_PAGE)).map((e) => ({ ...e, part: "created" as const })),
    key: (e) => e.id,
    before: (a, b) => a < b,
    justBefore: (id) => id.slice(0, -1),
    settled: firstIdAt(now - CHANGES_MARGIN_MS),
    cursor: state.created,
    since: instantOfId(state.created),
  });
  type At = { at: number; id: string };
  const changed = part<At>({
    read: async (after) => (await changedSince(db, after, CHANGES_PAGE)).map((e) => ({ ...e, part: "changed" as const })),
    key: (e) => ({ at: (e as ChangedEntry).updatedAt, id: e.id }),
    before: (a, b) => a.at < b.at || (a.at === b.at && a.id < b.id),
    justBefore: (k) => ({ at: k.at, id: k.id.slice(0, -1) }),
    settled: { at: now - CHANGES_MARGIN_MS, id: "" },
    cursor: state.changes,
    since: state.changes.at,
  });
  // A page of each part in turn, so that a backlog of one does not hold the other back, the part
  // further behind first: it gets the shards' calls when they do not suffice for both, until it
  // has caught up with the other.
  const parts = ([created, changed] as Array<Part<unknown>>).sort((a, b) => a.since - b.since);
  while (comparer.roomForPage && parts.some((p) => !p.done)) {
    for (const p of parts) {
      if (!p.done && comparer.roomForPage) await readPage(p, comparer);
    }
  }
  const result = await comparer.finish();
  state.created = cursorOf(
    created,
    result.unrepaired.filter((e) => e.part === "created"),
  );
  state.changes = cursorOf(
    changed,
    result.unrepaired.filter((e) => e.part === "changed"),
  );
  return { compared: result.compared, repaired: result.repaired, caughtUp: created.ended && changed.ended, failed: result.failed };
}

async function readPage<K>(p: Part<K>, comparer: ShardComparer<FeedEntry>): Promise<void> {
  const page = await p.read(p.reached);
  const taken = await comparer.take(page);
  if (taken > 0) p.reached = p.key(page[taken - 1]!);
  p.ended = taken === page.length && page.length < CHANGES_PAGE;
  // Past the settled line the rest is read again next minute anyway.
  p.done = p.ended || taken < page.length || !p.before(p.reached, p.settled);
}

/** The part's new cursor: as far as it compared, but never past the settled line nor the first job left unrepaired. */
function cursorOf<K>(p: Part<K>, unrepaired: FeedEntry[]): K {
  const first = unrepaired[0];
  if (first !== undefined) {
    const stop = p.justBefore(p.key(first));
    return p.before(p.cursor, stop) ? stop : p.cursor;
  }
  return p.before(p.reached, p.settled) ? p.reached : p.settled;
}
