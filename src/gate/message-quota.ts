/**
 * A tenant's live QStash messages, counted at its gate (tenant-gate.ts). A message is held by its
 * shard alone, with no catalog row (docs/qstash.md), and a tenant's messages are spread over
 * shards, so no one place holds the count: the gate keeps one that a publish reserves against,
 * and the tenant's shards are asked for the true count (a recount) when it runs short.
 *
 * Nothing is written per run: a message that is delivered (or dead, or cancelled) is not given
 * back to the gate one by one. The gate's count only grows between recounts, so it is never below
 * the truth by what it has seen; when a publish would take it over the limit, the API asks the
 * shards (`countLiveMessages`, one call per shard the tenant is registered in) and the count is
 * set to theirs. So delivered messages make room again at the first publish that needs it, and a
 * count that went wrong (a publish that reserved and then failed) is put right then too: nothing
 * can lock a tenant out for longer than RECOUNT_EVERY_MS. The count is also taken afresh when it
 * is older than RECOUNT_AFTER_MS, or was never taken (a new gate, a limit just set).
 *
 * What it allows: during a recount, publishes reserve against the count as it was, and those the
 * shards have not taken yet when asked are added back from `sinceRecount`; a publish that had
 * reserved before the recount began and reaches its shard after that shard was counted is missed
 * by that recount, so the limit may be passed by the messages of publishes in flight at a
 * recount (each at most MAX_MESSAGES_PER_REQUEST), until the next one. A message counted by its
 * shard and again in `sinceRecount` counts twice until the next recount: on the safe side.
 */

/** A new tenant's limit: as many live messages as it may have jobs. */
export const DEFAULT_MAX_LIVE_MESSAGES = 10_000;
/** At most one recount a second that finds the tenant full: a tenant at its limit cannot make its shards count on every publish. */
export const RECOUNT_EVERY_MS = 1_000;
/** A count older than this is taken again before a publish relies on it. */
export const RECOUNT_AFTER_MS = 10 * 60_000;
/** A recount whose answer never came (the API's call died) is forgotten after this. */
export const RECOUNT_TIMEOUT_MS = 30_000;

export interface MessageCount {
  /** Messages live as the gate knows them: the last recount, and what was reserved since. */
  live: number;
  /** When the shards last counted; null: never (or the count was dropped). */
  countedAt: number | null;
  /** When the recount under way began; null: none. */
  recountFrom: number | null;
  /** Reserved since that recount began: what its shards may not have had yet when asked. */
  sinceRecount: number;
}

export const UNCOUNTED: MessageCount = { live: 0, countedAt: null, recountFrom: null, sinceRecount: 0 };

/** `granted`: the messages are reserved; `recount`: count the shards, then `afterRecount`; `refused`: over the limit. */
export type Verdict = "granted" | "recount" | "refused";

function reserve(count: MessageCount, n: number): MessageCount {
  return { ...count, live: count.live + n, sinceRecount: count.recountFrom === null ? 0 : count.sinceRecount + n };
}

/** A publish of `n` messages under `limit`: whether it may go, and the count after. */
export function decideReserve(count: MessageCount, n: number, limit: number, now: number): { verdict: Verdict; next: MessageCount } {
  const recounting = count.recountFrom !== null && now - count.recountFrom < RECOUNT_TIMEOUT_MS;
  const fits = count.live + n <= limit;
  if (!recounting) {
    const stale = count.countedAt === null || now - count.countedAt > RECOUNT_AFTER_MS;
    const mayRecount = count.countedAt === null || now - count.countedAt >= RECOUNT_EVERY_MS;
    if (stale || (!fits && mayRecount)) return { verdict: "recount", next: { ...count, recountFrom: now, sinceRecount: 0 } };
  }
  if (fits) return { verdict: "granted", next: reserve(count, n) };
  return { verdict: "refused", next: count };
}

/**
 * The shards' count (`counted`) of the recount that began at `from`, then the publish of `n` that
 * asked for it: granted or refused against the count made true. An answer to an older recount
 * (one that timed out, and was begun again since) is not taken; the publish is decided on the
 * count as it stands.
 */
export function decideAfterRecount(
  count: MessageCount,
  from: number,
  counted: number,
  n: number,
  limit: number,
  now: number,
): { verdict: Exclude<Verdict, "recount">; next: MessageCount } {
  const base =
    count.recountFrom === from ? { live: counted + count.sinceRecount, countedAt: now, recountFrom: null, sinceRecount: 0 } : count;
  if (base.live + n <= limit) return { verdict: "granted", next: reserve(base, n) };
  return { verdict: "refused", next: base };
}

/** Messages reserved and then not made (the publish failed after its reservation): given back. */
export function giveBack(count: MessageCount, n: number): MessageCount {
  return { ...count, live: Math.max(0, count.live - n), sinceRecount: Math.max(0, count.sinceRecount - n) };
}
