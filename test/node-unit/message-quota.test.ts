import { describe, expect, it } from "vitest";
import {
  decideAfterRecount,
  decideReserve,
  giveBack,
  type MessageCount,
  RECOUNT_AFTER_MS,
  RECOUNT_EVERY_MS,
  RECOUNT_TIMEOUT_MS,
  UNCOUNTED,
} from "../../src/gate/message-quota";

/** The gate's count of live messages (src/gate/message-quota.ts), decided without the gate. */
const NOW = 1_000_000_000;
const counted = (live: number, at = NOW): MessageCount => ({ live, countedAt: at, recountFrom: null, sinceRecount: 0 });

describe("a tenant's count of live messages", () => {
  it("is taken from the shards before a never-counted gate grants anything", () => {
    expect(decideReserve(UNCOUNTED, 1, 10, NOW)).toEqual({ verdict: "recount", next: { ...UNCOUNTED, recountFrom: NOW } });
    const after = decideAfterRecount({ ...UNCOUNTED, recountFrom: NOW }, NOW, 9, 1, 10, NOW + 5);
    expect(after).toEqual({ verdict: "granted", next: { live: 10, countedAt: NOW + 5, recountFrom: null, sinceRecount: 0 } });
  });

  it("grants while it fits, and past the limit asks the shards again at most once a second", () => {
    expect(decideReserve(counted(8), 2, 10, NOW + 10)).toMatchObject({ verdict: "granted", next: { live: 10 } });
    expect(decideReserve(counted(10), 1, 10, NOW + RECOUNT_EVERY_MS - 1)).toEqual({ verdict: "refused", next: counted(10) });
    expect(decideReserve(counted(10), 1, 10, NOW + RECOUNT_EVERY_MS).verdict).toBe("recount");
    expect(decideReserve(counted(1), 1, 10, NOW + RECOUNT_AFTER_MS + 1).verdict).toBe("recount");
  });

  it("keeps what was reserved during a recount on top of the shards' count", () => {
    const recounting: MessageCount = { ...counted(10, NOW - RECOUNT_EVERY_MS), recountFrom: NOW };
    // Another publish meanwhile reserves against the old count (here it has no room) …
    expect(decideReserve(recounting, 1, 10, NOW + 1).verdict).toBe("refused");
    const roomy = decideReserve({ ...recounting, live: 5 }, 2, 10, NOW + 1);
    expect(roomy).toMatchObject({ verdict: "granted", next: { live: 7, sinceRecount: 2 } });
    // … and the shards' count, which may not have seen it, is taken with it added.
    expect(decideAfterRecount(roomy.next, NOW, 3, 1, 10, NOW + 2)).toMatchObject({ verdict: "granted", next: { live: 6 } });
    expect(decideAfterRecount(roomy.next, NOW, 9, 1, 10, NOW + 2)).toMatchObject({ verdict: "refused", next: { live: 11 } });
  });

  it("forgets a recount whose answer never came, and ignores an answer to one forgotten", () => {
    const lost: MessageCount = { ...counted(10, NOW - RECOUNT_TIMEOUT_MS), recountFrom: NOW - RECOUNT_TIMEOUT_MS };
    const again = decideReserve(lost, 1, 10, NOW);
    expect(again).toMatchObject({ verdict: "recount", next: { recountFrom: NOW } });
    expect(decideAfterRecount(again.next, NOW - RECOUNT_TIMEOUT_MS, 0, 1, 10, NOW)).toMatchObject({
      verdict: "refused",
      next: { live: 10 },
    });
  });

  it("gives back a failed publish's messages, never below zero", () => {
    expect(giveBack(counted(3), 2).live).toBe(1);
    expect(giveBack(counted(1), 5).live).toBe(0);
  });
});
