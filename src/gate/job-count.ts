/**
 * A tenant's live jobs (src/model/live-jobs.ts), counted at its gate against its `maxJobs`, so
 * that no creation counts them in D1 and none writes a row to be counted.
 *
 * The gate counts them in D1 now and then (a recount: src/catalog/live-jobs.ts), and between
 * recounts leases room to the Worker's isolates a block at a time (src/app/job-room.ts), adding
 * each lease to its count whole, spent or not. Each recount bumps the tenant's lease epoch in
 * the transaction that counts, and a job is inserted only on a lease of the current epoch
 * (src/catalog/insert-jobs.ts): every job is either in the last recount or on a lease granted
 * since, so the count is never below the tenant's live jobs and the quota is never passed. An
 * isolate whose lease a recount made stale takes room again.
 *
 * The count is above the truth by room leased and not spent yet (an isolate stops spending a
 * lease ROOM_LEASE_MS after it was granted) and by jobs finished or deleted since the last
 * recount, so a creation the count refuses begins a recount first (at most once every
 * RECOUNT_EVERY_MS) and is decided on its result. A job deleted through the API gives its place
 * back at once: counted only for a job deleted after the last recount's cutoff (the recount
 * counts a job deleted after its cutoff as live; one deleted before it, it did not count).
 *
 * A recount is also made when the tenant's quota is set or changed (before the change is
 * answered: from then on leases granted under the quota before no longer insert), when the count
 * was never taken, is older than RECOUNT_AFTER_MS (in the background: the jobs finished since
 * make room), or is of an older tenant than a creation's (a later version: should the gate have
 * missed the change, a quota taken away and set again left creations uncounted meanwhile).
 */

/** How long room leased to an isolate may be spent there. */
export const ROOM_LEASE_MS = 10_000;
/** The largest block of room one lease holds beyond what its request needs. */
export const MAX_ROOM_BLOCK = 64;
/** The least time between a recount and the next that a refusal begins; what a refusal says to wait at least. */
export const RECOUNT_EVERY_MS = 1_000;
/** A count older than this is taken again, in the background. */
export const RECOUNT_AFTER_MS = 10 * 60_000;

export interface JobCount {
  /** Live jobs as the gate knows them: the last recount, and room leased since, less places given back. */
  live: number;
  /** The lease epoch of the last recount: leases carry it, and only it inserts. */
  epoch: number;
  /** The last recount's cutoff. */
  countedAt: number;
  /** The tenant's version the count is of, and its quota then: a caller that read an older tenant is held to it. */
  tenantVersion: number;
  maxJobs: number;
}

/** Room leased: GateAnswer, with the lease epoch it inserts at. */
export type RoomAnswer = { granted: number; until: number; epoch: number } | { granted: 0; retryAfterMs: number };

/** What a lease may hold beyond its need, with `room` left: a sixteenth of it, at least 1, at most MAX_ROOM_BLOCK. */
export const roomBlockOf = (room: number): number => Math.max(1, Math.min(MAX_ROOM_BLOCK, Math.floor(room / 16)));

/** Whether a count must be taken before anything is granted on it: never taken, or of an older tenant. */
export const mustRecount = (count: JobCount | null, tenantVersion: number): boolean =>
  count === null || count.tenantVersion < tenantVersion;

/** Whether a count, usable as it is, should be taken again in the background. */
export const staleAt = (count: JobCount, now: number): boolean => now - count.countedAt >= RECOUNT_AFTER_MS;

/** Whether a refusal may begin a recount now: the last was at least RECOUNT_EVERY_MS ago. */
export const mayRecountAt = (count: JobCount, now: number): boolean => now - count.countedAt >= RECOUNT_EVERY_MS;

/**
 * Room for `need` jobs, and up to `want` (a block beyond it, within roomBlockOf), under the
 * quota at `now`: granted as much as fits if any does (a batch takes what fits), else refused,
 * saying when a recount may find some. `maxJobs` is the caller's, unless it read an older
 * tenant than the count's.
 */
export function leaseRoom(
  count: JobCount,
  maxJobs: number,
  tenantVersion: number,
  need: number,
  want: number,
  now: number,
): { next: JobCount; answer: RoomAnswer } {
  const newer = tenantVersion > count.tenantVersion;
  const limit = tenantVersion >= count.tenantVersion ? maxJobs : count.maxJobs;
  const base = newer ? { ...count, tenantVersion, maxJobs } : count;
  const room = limit - base.live;
  if (room < 1) {
    const retryAfterMs = Math.max(RECOUNT_EVERY_MS, base.countedAt + RECOUNT_EVERY_MS - now);
    return { next: base, answer: { granted: 0, retryAfterMs } };
  }
  const granted = Math.min(room, Math.max(need, Math.min(want, roomBlockOf(room))));
  return {
    next: { ...base, live: base.live + granted },
    answer: { granted, until: now + ROOM_LEASE_MS, epoch: base.epoch },
  };
}

/**
 * The count after a recount begun at `cutoff` found `live` jobs and bumped the epoch to `epoch`
 * (leases granted meanwhile are of the epoch before: they insert nothing, and are not counted),
 * `givenBack` the deletion instants of the places given back meanwhile.
 */
export function recounted(
  count: JobCount | null,
  found: { live: number; epoch: number },
  cutoff: number,
  tenant: { version: number; maxJobs: number },
  givenBack: number[],
): JobCount {
  const newer = count === null || tenant.version >= count.tenantVersion;
  return {
    live: Math.max(0, found.live - givenBack.filter((at) => at > cutoff).length),
    epoch: found.epoch,
    countedAt: cutoff,
    tenantVersion: newer ? tenant.version : count.tenantVersion,
    maxJobs: newer ? tenant.maxJobs : count.maxJobs,
  };
}

/** A place given back by a job deleted at `deletedAt`: only a job the count counted (deleted after its cutoff) frees one. */
export function givenBack(count: JobCount, deletedAt: number): JobCount {
  if (deletedAt <= count.countedAt) return count;
  return { ...count, live: Math.max(0, count.live - 1) };
}
