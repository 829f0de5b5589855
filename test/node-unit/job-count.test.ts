import { describe, expect, it } from "vitest";
import {
  givenBack,
  type JobCount,
  leaseRoom,
  MAX_ROOM_BLOCK,
  mayRecountAt,
  mustRecount,
  RECOUNT_AFTER_MS,
  RECOUNT_EVERY_MS,
  ROOM_LEASE_MS,
  recounted,
  roomBlockOf,
  staleAt,
} from "../../src/gate/job-count";
import { isLiveAt, lastInstantOf } from "../../src/model/live-jobs";

/** A tenant's live jobs as its gate counts them (src/gate/job-count.ts), decided without the gate. */
const NOW = 1_700_000_000_000;
const count = (live: number, countedAt = NOW, tenantVersion = 1, maxJobs = 10): JobCount => ({
  live,
  epoch: 7,
  countedAt,
  tenantVersion,
  maxJobs,
});

describe("a job live under maxJobs", () => {
  const iso = (ms: number) => new Date(ms).toISOString();
  const job = (schedule: Record<string, string>, deletedAt: number | null = null) => ({ spec: { schedule }, deletedAt });

  it("is a one-off whose instant is to come, a schedule whose endAt is, or one with neither; not deleted", () => {
    expect(isLiveAt(job({ at: iso(NOW + 1) }), NOW)).toBe(true);
    expect(isLiveAt(job({ at: iso(NOW) }), NOW)).toBe(false);
    expect(isLiveAt(job({ at: iso(NOW - 60_000) }), NOW)).toBe(false);
    expect(isLiveAt(job({ cron: "* * * * *", endAt: iso(NOW + 60_000) }), NOW)).toBe(true);
    expect(isLiveAt(job({ every: "1m", endAt: iso(NOW - 1) }), NOW)).toBe(false);
    expect(isLiveAt(job({ cron: "* * * * *" }), NOW)).toBe(true);
    expect(isLiveAt(job({ cron: "* * * * *" }, NOW - 1), NOW)).toBe(false);
    // Deleted after the instant asked about: it was live then.
    expect(isLiveAt(job({ cron: "* * * * *" }, NOW + 1), NOW)).toBe(true);
    expect(lastInstantOf({ every: "1m", startAt: iso(NOW) })).toBeNull();
  });
});

describe("room leased under maxJobs", () => {
  it("grants a request's need and a block beyond it (a sixteenth of the room, at most 64), counting the lease whole, at the count's epoch", () => {
    expect([0, 15, 16, 160, 1_024, 100_000].map(roomBlockOf)).toEqual([1, 1, 1, 10, 64, MAX_ROOM_BLOCK]);
    const { next, answer } = leaseRoom(count(9_000), 10_000, 1, 1, 64, NOW);
    expect(answer).toEqual({ granted: 62, until: NOW + ROOM_LEASE_MS, epoch: 7 });
    expect(next.live).toBe(9_062);
    expect(leaseRoom(count(0), 10_000, 1, 1, 4, NOW).answer).toMatchObject({ granted: 4 });
  });

  it("grants a batch what fits of it, at least 1; none when nothing fits, saying when a recount may find some", () => {
    expect(leaseRoom(count(9_990), 10_000, 1, 1_000, 1_000, NOW).answer).toMatchObject({ granted: 10 });
    expect(leaseRoom(count(5), 10, 1, 3, 3, NOW).answer).toMatchObject({ granted: 3 });
    const refused = leaseRoom(count(10, NOW - 200), 10, 1, 1, 1, NOW);
    expect(refused).toEqual({ next: count(10, NOW - 200), answer: { granted: 0, retryAfterMs: RECOUNT_EVERY_MS } });
    expect(leaseRoom(count(12), 10, 1, 1, 1, NOW).answer).toMatchObject({ granted: 0 });
  });

  it("holds a caller that read an older tenant to the quota of the count's, and takes a newer caller's", () => {
    // The quota was lowered to 5 (tenant version 3); an isolate that still has version 2 asks with 10.
    const lowered = count(5, NOW, 3, 5);
    expect(leaseRoom(lowered, 10, 2, 1, 1, NOW).answer).toMatchObject({ granted: 0 });
    const raised = leaseRoom(lowered, 8, 4, 1, 1, NOW);
    expect(raised.answer).toMatchObject({ granted: 1 });
    expect(raised.next).toMatchObject({ live: 6, tenantVersion: 4, maxJobs: 8 });
  });
});

describe("a recount", () => {
  it("is what D1 counted live at its cutoff, at the epoch it bumped: leases of the one before are not counted", () => {
    const next = recounted(count(50, NOW - 60_000), { live: 20, epoch: 8 }, NOW, { version: 2, maxJobs: 30 }, []);
    expect(next).toEqual({ live: 20, epoch: 8, countedAt: NOW, tenantVersion: 2, maxJobs: 30 });
  });

  it("takes off the places given back meanwhile, only for jobs deleted after its cutoff", () => {
    expect(recounted(count(9), { live: 20, epoch: 8 }, NOW, { version: 1, maxJobs: 30 }, [NOW - 5, NOW + 3, NOW + 4]).live).toBe(18);
  });

  it("begun by a caller that read an older tenant keeps the newer tenant's quota", () => {
    expect(recounted(count(9, NOW - 1, 5, 3), { live: 2, epoch: 8 }, NOW, { version: 4, maxJobs: 30 }, [])).toMatchObject({
      tenantVersion: 5,
      maxJobs: 3,
    });
  });

  it("never counted, or of an older tenant, must be taken before anything is granted; old, again in the background", () => {
    expect(mustRecount(null, 1)).toBe(true);
    expect(mustRecount(count(3), 2)).toBe(true);
    expect(mustRecount(count(3), 1)).toBe(false);
    // A caller that read the tenant before the count was taken does not make it count again.
    expect(mustRecount(count(3, NOW, 5), 4)).toBe(false);
    expect(staleAt(count(3, NOW - RECOUNT_AFTER_MS + 1), NOW)).toBe(false);
    expect(staleAt(count(3, NOW - RECOUNT_AFTER_MS), NOW)).toBe(true);
    expect(mayRecountAt(count(3, NOW - RECOUNT_EVERY_MS + 1), NOW)).toBe(false);
    expect(mayRecountAt(count(3, NOW - RECOUNT_EVERY_MS), NOW)).toBe(true);
  });
});

describe("a place given back", () => {
  it("frees one for a job deleted after the count's cutoff; a job deleted before it was not counted", () => {
    expect(givenBack(count(5, NOW), NOW + 1).live).toBe(4);
    expect(givenBack(count(5, NOW), NOW).live).toBe(5);
    expect(givenBack(count(0, NOW), NOW + 1).live).toBe(0);
  });
});
