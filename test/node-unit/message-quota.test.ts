import { describe, expect, it } from "vitest";
import {
  decideReserve,
  giveBack,
  type MessageCount,
  RECOUNT_AFTER_MS,
  RECOUNT_EVERY_MS,
  RECOUNT_MS_PER_SHARD,
  RECOUNT_RETRY_MS,
  recountEvery,
  recountFailed,
  recountFinished,
  recountProgressed,
  UNCOUNTED,
} from "../../src/gate/message-quota";

/** The gate's count of live messages (src/gate/message-quota.ts), decided without the gate. */
const NOW = 1_000_000_000;
const counted = (live: number, at = NOW, shards = 1): MessageCount => ({ live, countedAt: at, shards, recount: null, sinceRecount: 0 });
const begun = (from: number) => ({ from, after: null, counted: 0, shards: 0, dueAt: from });

describe("a tenant's count of live messages", () => {
  it("never counted, grants what fits at once and begins a recount in the background", () => {
    const first = decideReserve(UNCOUNTED, 1, NOW, 10, NOW);
    expect(first).toEqual({
      verdict: "granted",
      next: { ...UNCOUNTED, live: 1, recount: begun(NOW), sinceRecount: 1 },
      recountBegun: true,
      retryAfterMs: 0,
    });
    // The next publish does not begin another while it runs.
    expect(decideReserve(first.next, 2, NOW + 1, 10, NOW + 1)).toMatchObject({
      verdict: "granted",
      recountBegun: false,
      next: { live: 3 },
    });
  });

  it("stale, grants what fits at once, recounting in the background", () => {
    const old = counted(1, NOW - RECOUNT_AFTER_MS - 1);
    expect(decideReserve(old, 1, NOW, 10, NOW)).toMatchObject({
      verdict: "granted",
      recountBegun: true,
      next: { live: 2, recount: begun(NOW) },
    });
    expect(decideReserve(counted(1, NOW - RECOUNT_AFTER_MS), 1, NOW, 10, NOW)).toMatchObject({ verdict: "granted", recountBegun: false });
  });

  it("past the limit refuses at once, and begins a recount at most once per interval, longer for a tenant on more shards", () => {
    expect(decideReserve(counted(8), 2, NOW + 10, 10, NOW + 10)).toMatchObject({
      verdict: "granted",
      recountBegun: false,
      next: { live: 10 },
    });
    const early = decideReserve(counted(10), 1, NOW + RECOUNT_EVERY_MS - 1, 10, NOW + RECOUNT_EVERY_MS - 1);
    expect(early).toEqual({ verdict: "refused", next: counted(10), recountBegun: false, retryAfterMs: RECOUNT_EVERY_MS });
    const due = decideReserve(counted(10), 1, NOW + RECOUNT_EVERY_MS, 10, NOW + RECOUNT_EVERY_MS);
    expect(due).toEqual({
      verdict: "refused",
      next: { ...counted(10), recount: begun(NOW + RECOUNT_EVERY_MS) },
      recountBegun: true,
      retryAfterMs: RECOUNT_EVERY_MS,
    });
    // Refused again while it runs: no other is begun.
    expect(decideReserve(due.next, 1, NOW + RECOUNT_EVERY_MS + 1, 10, NOW + RECOUNT_EVERY_MS + 1)).toMatchObject({
      verdict: "refused",
      recountBegun: false,
    });

    // 4,096 shards: a recount at most every 4,096 × 50 ms, and the refusal says when.
    expect(recountEvery(4_096)).toBe(4_096 * RECOUNT_MS_PER_SHARD);
    const wide = counted(10, NOW, 4_096);
    expect(decideReserve(wide, 1, NOW + 60_000, 10, NOW + 60_000)).toMatchObject({
      verdict: "refused",
      recountBegun: false,
      retryAfterMs: 4_096 * RECOUNT_MS_PER_SHARD - 60_000,
    });
    expect(decideReserve(wide, 1, NOW + 4_096 * RECOUNT_MS_PER_SHARD, 10, NOW + 4_096 * RECOUNT_MS_PER_SHARD).recountBegun).toBe(true);
  });

  it("a recount goes on from the last shard asked, and ends with the shards' count and what was reserved since", () => {
    const recounting: MessageCount = { ...counted(10, NOW - RECOUNT_AFTER_MS - 1), live: 5, recount: begun(NOW) };
    // A publish meanwhile reserves against the old count …
    const roomy = decideReserve(recounting, 2, NOW + 1, 10, NOW + 1);
    expect(roomy).toMatchObject({ verdict: "granted", recountBegun: false, next: { live: 7, sinceRecount: 2 } });
    // One made before it began (reserved late, its id older) is the shards' to count: not added.
    expect(decideReserve(roomy.next, 1, NOW - 1, 10, NOW + 1)).toMatchObject({ verdict: "granted", next: { live: 8, sinceRecount: 2 } });
    const half = recountProgressed(roomy.next, NOW, "shard-5", 3, 6, NOW + 2);
    expect(half.recount).toEqual({ from: NOW, after: "shard-5", counted: 3, shards: 6, dueAt: NOW + 2 });
    const all = recountProgressed(half, NOW, "shard-9", 1, 4, NOW + 3);
    // … and the shards, which counted only what was made before it began, have it added.
    expect(recountFinished(all, NOW, NOW + 4)).toEqual({ live: 6, countedAt: NOW + 4, shards: 10, recount: null, sinceRecount: 0 });
  });

  it("a step that failed is tried again later from where it was; an answer to another recount is not taken", () => {
    const half = recountProgressed({ ...UNCOUNTED, recount: begun(NOW) }, NOW, "shard-5", 3, 6, NOW + 2);
    const failed = recountFailed(half, NOW, NOW + 3);
    expect(failed.recount).toEqual({ ...half.recount, dueAt: NOW + 3 + RECOUNT_RETRY_MS });
    expect(recountProgressed(failed, NOW - 1, "shard-7", 9, 1, NOW + 4)).toBe(failed);
    expect(recountFinished(failed, NOW - 1, NOW + 4)).toBe(failed);
  });

  it("gives back a failed publish's messages, never below zero, and from what a recount adds only if they were in it", () => {
    expect(giveBack(counted(3), 2, NOW).live).toBe(1);
    expect(giveBack(counted(1), 5, NOW).live).toBe(0);
    const recounting: MessageCount = { ...counted(5), recount: begun(NOW), sinceRecount: 3 };
    expect(giveBack(recounting, 2, NOW)).toMatchObject({ live: 3, sinceRecount: 1 });
    expect(giveBack(recounting, 2, NOW - 1)).toMatchObject({ live: 3, sinceRecount: 3 });
  });
});
