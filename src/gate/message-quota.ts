/**
 * A tenant's live QStash messages, counted at its gate (tenant-gate.ts). A message is held by its
 * shard alone, with no catalog row (docs/qstash.md), and a tenant's messages are spread over
 * shards (a random one each; there may be thousands), so no one place holds the count: the gate
 * keeps one that a publish reserves against, and the gate's alarm asks the tenant's shards for
 * the true count (a recount) when it is due.
 *
 * Nothing is written per run: a message that is delivered (or dead, or cancelled) is not given
 * back to the gate one by one. The gate's count only grows between recounts, so it is never below
 * the truth by what it has seen. A recount asks every shard the tenant is registered in
 * (`shard_tenants`), one call each, so no publish ever waits for one: it is the gate's alarm
 * that asks them, a few at a time (RECOUNT_CONCURRENCY), at most RECOUNT_SHARDS_PER_STEP shards
 * or RECOUNT_STEP_BUDGET_MS per alarm, the next alarm going on from the last shard asked, and
 * the count is set to theirs when the last has answered. A publish is decided on the count as it
 * stands: granted if it fits, else refused (429, Retry-After). One is begun
 * - when the count is stale: older than RECOUNT_AFTER_MS, or never taken (a new tenant, a gate
 *   whose count was dropped); the publish that finds it so is granted if it fits, at once;
 * - when a publish would pass the limit: refused at once, and the next publish after the recount
 *   sees room that deliveries made. At most once every `recountEvery(shards)` from the last
 *   recount, which grows with the tenant's shards (RECOUNT_MS_PER_SHARD each), so a tenant that
 *   keeps publishing at its limit makes its shards answer at most some twenty calls a second,
 *   however many they are: a tenant on a shard or two sees room within a second or so of a
 *   refusal, one on 4,096 shards within about three and a half minutes (Retry-After says when).
 * So room frees within that interval (and a recount) of a refusal, and a count that went wrong (a
 * publish that reserved and then failed) is put right then too: nothing can lock a tenant out.
 *
 * What it allows: a recount begins at a time on the API's clock (the ids' of the publish that
 * began it); a shard counts only the messages made before it (their ids say when), and those made
 * since are added from `sinceRecount` as they are reserved, so nothing counts twice; a message
 * made before it that reaches its shard after that shard was asked is missed by that recount, so
 * the limit may be passed by the messages of publishes in flight at a recount's start (each at
 * most MAX_MESSAGES_PER_REQUEST), until the next one. And a stale count is trusted until
 * the recount ends: one older than RECOUNT_AFTER_MS is above the truth, so that is safe; one
 * never taken starts at zero, so a tenant whose gate lost its count may pass the limit by what
 * it publishes while the first recount runs (a new tenant has nothing to pass it with).
 */

/** A new tenant's limit: as many live messages as it may have jobs. */
export const DEFAULT_MAX_LIVE_MESSAGES = 10_000;
/** The least time between a recount and one a refusal begins, and what a refusal during a recount says to wait. */
export const RECOUNT_EVERY_MS = 1_000;
/** Per shard the tenant's last recount asked, the time until a refusal may begin another: bounds the shard calls refusals cause to twenty a second. */
export const RECOUNT_MS_PER_SHARD = 50;
/** A count older than this is taken again (in the background) at the next publish. */
export const RECOUNT_AFTER_MS = 10 * 60_000;
/** A recount's step that failed (D1 or a shard unreachable) is tried again this much later, from where it was. */
export const RECOUNT_RETRY_MS = 5_000;
/** Shards asked at once by a recount: a Durable Object invocation's simultaneous subrequests are few. */
export const RECOUNT_CONCURRENCY = 6;
/** Shards one alarm asks at most; more are asked by the next alarm, set at once. */
export const RECOUNT_SHARDS_PER_STEP = 240;
/** Time after which an alarm's step stops asking more shards and leaves the rest to the next. */
export const RECOUNT_STEP_BUDGET_MS = 5_000;

/** A recount under way: the shards asked so far, in name order, and what they counted. */
export interface Recount {
  /** When it began: shards count the messages made before, `sinceRecount` holds those reserved since. */
  from: number;
  /** The last shard asked (null: none yet): the next step asks those after it. */
  after: string | null;
  counted: number;
  shards: number;
  /** When the gate's alarm takes its next step. */
  dueAt: number;
}

export interface MessageCount {
  /** Messages live as the gate knows them: the last recount, and what was reserved since. */
  live: number;
  /** When the shards last counted; null: never (or the count was dropped). */
  countedAt: number | null;
  /** Shards the last recount asked: how far apart refusals' recounts are (`recountEvery`). */
  shards: number;
  recount: Recount | null;
  /** Reserved since the recount under way began: what its shards do not count. */
  sinceRecount: number;
}

export const UNCOUNTED: MessageCount = { live: 0, countedAt: null, shards: 0, recount: null, sinceRecount: 0 };

export type Verdict = "granted" | "refused";

/** How long after a recount that asked `shards` shards a refusal may begin another. */
export function recountEvery(shards: number): number {
  return Math.max(RECOUNT_EVERY_MS, shards * RECOUNT_MS_PER_SHARD);
}

/** Made at or after the recount began (by their ids' clock), the shards do not count them: `sinceRecount` does. */
function reserve(count: MessageCount, n: number, madeAt: number): MessageCount {
  const since = count.recount !== null && madeAt >= count.recount.from;
  return { ...count, live: count.live + n, sinceRecount: count.recount === null ? 0 : count.sinceRecount + (since ? n : 0) };
}

/**
 * A publish of `n` messages made at `madeAt` (the time their ids hold, the API's clock) under
 * `limit`: whether it may go, the count after, whether a recount was begun by it (from
 * `madeAt`, so the shards leave its messages to `sinceRecount`; the gate's alarm takes its first
 * step now), and, refused, how long to wait.
 */
export function decideReserve(
  count: MessageCount,
  n: number,
  madeAt: number,
  limit: number,
  now: number,
): { verdict: Verdict; next: MessageCount; recountBegun: boolean; retryAfterMs: number } {
  const fits = count.live + n <= limit;
  const stale = count.countedAt === null || now - count.countedAt > RECOUNT_AFTER_MS;
  const mayRecount = count.countedAt === null || now - count.countedAt >= recountEvery(count.shards);
  const recountBegun = count.recount === null && (stale || (!fits && mayRecount));
  const base: MessageCount = recountBegun
    ? { ...count, recount: { from: madeAt, after: null, counted: 0, shards: 0, dueAt: now }, sinceRecount: 0 }
    : count;
  if (fits) return { verdict: "granted", next: reserve(base, n, madeAt), recountBegun, retryAfterMs: 0 };
  const retryAfterMs =
    base.recount !== null || base.countedAt === null
      ? RECOUNT_EVERY_MS
      : Math.max(RECOUNT_EVERY_MS, base.countedAt + recountEvery(base.shards) - now);
  return { verdict: "refused", next: base, recountBegun, retryAfterMs };
}

/** Shards up to `after` answered with `counted` more live messages: the recount begun at `from` goes on from there. */
export function recountProgressed(
  count: MessageCount,
  from: number,
  after: string,
  counted: number,
  shards: number,
  now: number,
): MessageCount {
  const r = count.recount;
  if (r === null || r.from !== from) return count;
  return { ...count, recount: { ...r, after, counted: r.counted + counted, shards: r.shards + shards, dueAt: now } };
}

/** A step of the recount failed: tried again later from the last shard that answered. */
export function recountFailed(count: MessageCount, from: number, now: number): MessageCount {
  const r = count.recount;
  if (r === null || r.from !== from) return count;
  return { ...count, recount: { ...r, dueAt: now + RECOUNT_RETRY_MS } };
}

/** Every shard answered: the count is theirs, and what was reserved since the recount began. */
export function recountFinished(count: MessageCount, from: number, now: number): MessageCount {
  const r = count.recount;
  if (r === null || r.from !== from) return count;
  return { live: r.counted + count.sinceRecount, countedAt: now, shards: r.shards, recount: null, sinceRecount: 0 };
}

/** Messages made at `madeAt`, reserved and then not made (the publish failed after its reservation): given back, from `sinceRecount` too if they were in it. */
export function giveBack(count: MessageCount, n: number, madeAt: number): MessageCount {
  const since = count.recount !== null && madeAt >= count.recount.from;
  return { ...count, live: Math.max(0, count.live - n), sinceRecount: since ? Math.max(0, count.sinceRecount - n) : count.sinceRecount };
}
