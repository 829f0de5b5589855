import { describe, expect, it } from "vitest";
import { fitted, keptMessages, truncationMarker } from "../../src/consumer/kept-outcomes";
import type { Outcome } from "../../src/protocol/queue-messages";

const bytes = (v: unknown) => new TextEncoder().encode(JSON.stringify(v)).length;
const success = (i: number, result: string): Outcome => ({ runId: `r${i}`, fence: 1, ok: true, status: 200, error: null, result });

describe("outcomes kept on the queue", () => {
  it("a group of large results goes as several messages, each within 128 KB, in sends within 256 KB; none is cut", () => {
    const outcomes = Array.from({ length: 100 }, (_, i) => success(i, "x".repeat(60_000)));
    const batches = keptMessages("shard-1", outcomes);
    const messages = batches.flat();
    expect(messages.flatMap((m) => m.outcomes)).toEqual(outcomes);
    for (const m of messages) expect(bytes(m)).toBeLessThanOrEqual(128_000);
    for (const b of batches) expect(b.reduce((n, m) => n + bytes(m) + 100, 0)).toBeLessThanOrEqual(256_000);
    expect(messages.length).toBe(50);
  });

  it("one outcome too large for a message alone keeps its result's start, marked", () => {
    const result = "\u0001".repeat(65_536);
    const o = fitted(success(1, result), 100_000);
    expect(bytes(o)).toBeLessThanOrEqual(100_000);
    const kept = o.result!.indexOf("\n[edgecron");
    expect(o.result).toBe(result.slice(0, kept) + truncationMarker(kept, result.length));
    // The longest start that fits: one character more would not.
    expect(bytes({ ...o, result: result.slice(0, kept + 1) + truncationMarker(kept + 1, result.length) })).toBeGreaterThan(100_000);
    const failure: Outcome = { runId: "r", fence: 1, ok: false, status: 500, error: "HTTP 500" };
    expect(fitted(failure, 100)).toBe(failure);
  });
});
