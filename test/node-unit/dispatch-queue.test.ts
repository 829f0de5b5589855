import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { dispatchQueueIndex } from "../../src/model/dispatch-queue";

describe("the shard → dispatch queue mapping", () => {
  it("is the shard's number modulo the queue count", () => {
    expect([0, 1, 2, 3, 4, 15].map((n) => dispatchQueueIndex(`shard-${n}`, 2))).toEqual([0, 1, 0, 1, 0, 1]);
    expect([0, 1, 2, 3, 4, 15].map((n) => dispatchQueueIndex(`shard-${n}`, 4))).toEqual([0, 1, 2, 3, 0, 3]);
    expect(dispatchQueueIndex("shard-4095", 3)).toBe(0);
  });

  it("sends every shard to the one queue when there is one", () => {
    fc.assert(fc.property(fc.string(), (shard) => dispatchQueueIndex(shard, 1) === 0));
  });

  it("always gives a queue that exists", () => {
    fc.assert(
      fc.property(fc.string(), fc.integer({ min: 1, max: 64 }), (shard, k) => {
        const i = dispatchQueueIndex(shard, k);
        return Number.isInteger(i) && i >= 0 && i < k;
      }),
    );
  });

  it("gives each queue the same number of shards when the queue count divides the shard count", () => {
    for (const [shards, k] of [
      [16, 2],
      [16, 4],
      [4096, 8],
    ] as const) {
      const counts = Array<number>(k).fill(0);
      for (let n = 0; n < shards; n++) counts[dispatchQueueIndex(`shard-${n}`, k)]!++;
      expect(counts).toEqual(Array(k).fill(shards / k));
    }
  });

  it("maps a name that is not shard-<n> by its FNV-1a hash", () => {
    // FNV-1a 32, computed independently: "elsewhere" is 404146571 (3 mod 4) and "shard-x"
    // 3349498334 (2 mod 4). "shard-1234567890123456" has 16 digits, one more than a shard number
    // has, so it is hashed too: 2608822212, 2 mod 5, where its number would give 1 (it ends in 6).
    expect(dispatchQueueIndex("elsewhere", 4)).toBe(3);
    expect(dispatchQueueIndex("shard-x", 4)).toBe(2);
    expect(dispatchQueueIndex("shard-1234567890123456", 5)).toBe(2);
  });

  // The mapping must not change between releases: these values are fixed for good.
  it("is stable: these shards keep these queues", () => {
    expect(["shard-0", "shard-7", "shard-10", "shard-123456"].map((s) => dispatchQueueIndex(s, 4))).toEqual([0, 3, 2, 0]);
    // 10^6 ≡ 1 (mod 7), so 10^15 − 1 ≡ 10^3 − 1 = 999 = 7 × 142 + 5.
    expect(dispatchQueueIndex("shard-999999999999999", 7)).toBe(5);
  });
});
