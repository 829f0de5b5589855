import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { Allotments } from "../../src/app/allotments";
import type { GateAnswer } from "../../src/gate/blocks";
import { type Bucket, MAX_REQUEST_BLOCK, REQUEST_BLOCK_MS, requestBlockOf, takeTokens } from "../../src/gate/request-bucket";

/**
 * A tenant's request rate: the gate's bucket (src/gate/request-bucket.ts) and the blocks
 * isolates take from it and spend (src/app/allotments.ts), with the clock set by the test.
 */
const T0 = 1_700_000_000_000;

/** One tenant's gate: its bucket, and how often it was asked. */
function gate(perSecond: number) {
  let bucket: Bucket = { tokens: 0, at: 0 };
  const asked: number[] = [];
  return {
    asked,
    take: async (want: number): Promise<GateAnswer> => {
      asked.push(want);
      const taken = takeTokens(bucket, perSecond, want, Date.now());
      bucket = taken.bucket;
      return taken.answer;
    },
  };
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(T0);
});
afterEach(() => {
  vi.useRealTimers();
});

describe("the gate's bucket", () => {
  it("gives a block of at most a tenth of a second's worth, at least 1, at most 64, and never more than it holds", () => {
    expect([1, 2, 9, 10, 25, 100, 640, 10_000].map(requestBlockOf)).toEqual([1, 1, 1, 1, 2, 10, 64, MAX_REQUEST_BLOCK]);
    const full = takeTokens({ tokens: 0, at: 0 }, 100, 1_000, T0);
    expect(full.answer).toEqual({ granted: 10, until: T0 + REQUEST_BLOCK_MS });
    expect(full.bucket.tokens).toBe(90);
    expect(takeTokens({ tokens: 3.5, at: T0 }, 100, 1_000, T0).answer).toEqual({ granted: 3, until: T0 + REQUEST_BLOCK_MS });
    expect(takeTokens({ tokens: 50, at: T0 }, 100, 4, T0).answer).toEqual({ granted: 4, until: T0 + REQUEST_BLOCK_MS });
  });

  it("with less than a token, refuses, saying when one will be there", () => {
    expect(takeTokens({ tokens: 0.25, at: T0 }, 2, 1, T0).answer).toEqual({ granted: 0, retryAfterMs: 375 });
    // It refills continuously: half a second later at 2 a second, it has one.
    expect(takeTokens({ tokens: 0.25, at: T0 }, 2, 1, T0 + 500).answer).toEqual({ granted: 1, until: T0 + 500 + REQUEST_BLOCK_MS });
  });
});

describe("an isolate's blocks", () => {
  it("a steady tenant costs a gate call per block, the blocks doubling up to the gate's largest", async () => {
    const g = gate(10_000);
    const tokens = new Allotments(MAX_REQUEST_BLOCK);
    for (let i = 0; i < 1 + 2 + 4 + 8 + 16 + 32 + 64 * 3; i++) {
      expect(await tokens.take("t", 1, g.take)).toMatchObject({ got: 1 });
    }
    expect(g.asked).toEqual([1, 2, 4, 8, 16, 32, 64, 64, 64]);
  });

  it("an isolate that sees the tenant now and then keeps taking one at a time", async () => {
    const g = gate(10_000);
    const tokens = new Allotments(MAX_REQUEST_BLOCK);
    for (let i = 0; i < 5; i++) {
      expect(await tokens.take("t", 1, g.take)).toMatchObject({ got: 1 });
      vi.setSystemTime(Date.now() + 3 * REQUEST_BLOCK_MS);
    }
    expect(g.asked).toEqual([1, 1, 1, 1, 1]);
  });

  it("a block lapsed mostly unspent halves the next", async () => {
    const g = gate(10_000);
    const tokens = new Allotments(MAX_REQUEST_BLOCK);
    for (let i = 0; i < 1 + 2 + 4 + 1; i++) await tokens.take("t", 1, g.take);
    expect(g.asked).toEqual([1, 2, 4, 8]);
    vi.setSystemTime(Date.now() + REQUEST_BLOCK_MS);
    await tokens.take("t", 1, g.take);
    expect(g.asked.at(-1)).toBe(4);
  });

  it("requests at once each ask (none awaits another's), and what they bring is held together", async () => {
    const g = gate(10_000);
    const tokens = new Allotments(MAX_REQUEST_BLOCK);
    await tokens.take("t", 1, g.take);
    await tokens.take("t", 1, g.take);
    await tokens.take("t", 1, g.take);
    expect(g.asked).toEqual([1, 2]);
    const answers = await Promise.all(Array.from({ length: 4 }, () => tokens.take("t", 1, g.take)));
    expect(answers.every((a) => "until" in a)).toBe(true);
    // Four blocks of 4 asked at once, four spent: the next 12 need no ask.
    expect(g.asked).toEqual([1, 2, 4, 4, 4, 4]);
    for (let i = 0; i < 12; i++) await tokens.take("t", 1, g.take);
    expect(g.asked).toHaveLength(6);
  });

  it("a request the gate refused is served from a block another request brought meanwhile", async () => {
    const tokens = new Allotments(MAX_REQUEST_BLOCK);
    let calls = 0;
    // The first ask is answered after the second: refused, while the second brought 5.
    const ask = async (): Promise<GateAnswer> => {
      const mine = ++calls;
      if (mine === 1) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        return { granted: 0, retryAfterMs: 1_000 };
      }
      return { granted: 5, until: Date.now() + REQUEST_BLOCK_MS };
    };
    const [first, second] = await Promise.all([tokens.take("t", 1, ask), tokens.take("t", 1, ask)]);
    expect(second).toMatchObject({ got: 1 });
    expect(first).toMatchObject({ got: 1 });
  });

  it("a refusal is answered from memory until its retry time, with no gate call", async () => {
    const g = gate(2);
    const tokens = new Allotments(MAX_REQUEST_BLOCK);
    expect(await tokens.take("t", 1, g.take)).toMatchObject({ got: 1 });
    expect(await tokens.take("t", 1, g.take)).toMatchObject({ got: 1 });
    expect(await tokens.take("t", 1, g.take)).toEqual({ got: 0, retryAfterMs: 500 });
    const calls = g.asked.length;
    vi.setSystemTime(Date.now() + 200);
    expect(await tokens.take("t", 1, g.take)).toEqual({ got: 0, retryAfterMs: 300 });
    expect(g.asked).toHaveLength(calls);
    vi.setSystemTime(Date.now() + 300);
    expect(await tokens.take("t", 1, g.take)).toMatchObject({ got: 1 });
  });

  it("with `partial`, what is held is taken when the gate has no more; else the need is asked whole", async () => {
    const room = new Allotments(64);
    let left = 5;
    const ask = async (want: number): Promise<GateAnswer> => {
      const granted = Math.min(want, left);
      left -= granted;
      return granted > 0 ? { granted, until: Date.now() + 10_000 } : { granted: 0, retryAfterMs: 1_000 };
    };
    expect(await room.take("t", 3, ask, true)).toMatchObject({ got: 3 });
    expect(await room.take("t", 10, ask, true)).toMatchObject({ got: 2 });
    expect(await room.take("t", 1, ask, true)).toEqual({ got: 0, retryAfterMs: 1_000 });
  });

  it("a block is not spent within `margin` of its end", async () => {
    const room = new Allotments(64, 2_000);
    const ask = vi.fn(async (want: number): Promise<GateAnswer> => ({ granted: want, until: Date.now() + 10_000 }));
    await room.take("t", 1, ask);
    await room.take("t", 1, ask);
    expect(ask).toHaveBeenCalledTimes(2);
    await room.take("t", 1, ask);
    expect(ask).toHaveBeenCalledTimes(2);
    vi.setSystemTime(Date.now() + 8_000);
    await room.take("t", 1, ask);
    expect(ask).toHaveBeenCalledTimes(3);
  });
});

describe("the rate over many isolates", () => {
  it("requests admitted over any window are at most perSecond × (t + 1 + a block's life), however many isolates", async () => {
    const perSecond = 100;
    const g = gate(perSecond);
    const isolates = Array.from({ length: 8 }, () => new Allotments(MAX_REQUEST_BLOCK));
    const admitted: number[] = [];
    // 8 isolates, each sending a request every 2 ms for 10 seconds: 40 times the rate.
    for (let ms = 0; ms < 10_000; ms += 2) {
      vi.setSystemTime(T0 + ms);
      for (const isolate of isolates) if ("until" in (await isolate.take("t", 1, g.take))) admitted.push(ms);
    }
    for (const [from, t] of [
      [0, 1_000],
      [0, 10_000],
      [3_000, 500],
      [5_000, 2_000],
    ] as const) {
      const within = admitted.filter((ms) => ms >= from && ms < from + t).length;
      expect(within, `[${from}, ${from + t})`).toBeLessThanOrEqual(perSecond * (t / 1000 + 1 + REQUEST_BLOCK_MS / 1000));
    }
    // And the rate is used: over the 10 seconds, near what the bucket gives (its burst, then 100 a second).
    expect(admitted.length).toBeGreaterThan(perSecond * 9);
  });
});
