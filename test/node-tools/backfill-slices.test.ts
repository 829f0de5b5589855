import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { covered, FIRES_PER_CALL, firstSlice, halved, nextSlice, type Slice } from "../../cli/backfill-slices.ts";

/**
 * How `edgecron backfill` slices a range, driven against the API's rule (a call is refused when
 * its closed range holds more than FIRES_PER_CALL fires) for schedules of every density.
 */
/** Fires in [a, b] of a sorted list, by binary search: the year below has half a million. */
function countIn(fires: number[], a: number, b: number): number {
  const firstAtLeast = (t: number) => {
    let lo = 0;
    let hi = fires.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (fires[mid]! < t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  return firstAtLeast(b + 1) - firstAtLeast(a);
}

function drive(fires: number[], from: number, to: number) {
  const accepted: Slice[] = [];
  let refusals = 0;
  let slice: Slice | null = firstSlice(from, to);
  while (slice) {
    const { from: a, to: b } = slice;
    const inside = countIn(fires, a, b);
    if (inside > FIRES_PER_CALL) {
      refusals++;
      slice = halved(slice);
      continue;
    }
    accepted.push(slice);
    expect(covered(from, to, slice)).toBeLessThanOrEqual(1);
    slice = nextSlice(slice, inside, to);
    if (accepted.length + refusals > 10_000) throw new Error("no end in sight");
  }
  return { accepted, refusals };
}

describe("backfill slices", () => {
  it("cover the range exactly once, each within the per-call limit", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 600_000 }), fc.integer({ min: 0, max: 5_000 }), (everyMs, count) => {
        const from = Date.parse("2026-01-01T00:00:00Z");
        const to = from + everyMs * count;
        const fires = Array.from({ length: count + 1 }, (_, k) => from + k * everyMs);
        const { accepted } = drive(fires, from, to);
        expect(accepted[0]!.from).toBe(from);
        expect(accepted.at(-1)!.to).toBe(to);
        for (let i = 1; i < accepted.length; i++) expect(accepted[i]!.from).toBe(accepted[i - 1]!.to + 1);
        const total = accepted.reduce((n, s) => n + countIn(fires, s.from, s.to), 0);
        expect(total).toBe(fires.length);
        expect(covered(from, to, accepted.at(-1)!)).toBe(1);
      }),
      { numRuns: 200 },
    );
  });

  it("take one call for a range within the limit, and few more for a long one", () => {
    const from = 0;
    const minute = 60_000;
    expect(
      drive(
        Array.from({ length: 1_000 }, (_, k) => k * minute),
        from,
        999 * minute,
      ).accepted,
    ).toHaveLength(1);
    // A year of a once-a-minute cron: 525,601 fires, at least 526 calls; sizing by density keeps it near that.
    const year = 525_600;
    const { accepted, refusals } = drive(
      Array.from({ length: year + 1 }, (_, k) => k * minute),
      from,
      year * minute,
    );
    expect(accepted.length).toBeLessThan(Math.ceil((year + 1) / FIRES_PER_CALL / 0.9) + 3);
    expect(refusals).toBeLessThan(15);
  });

  it("cannot split one instant", () => {
    expect(() => halved({ from: 5, to: 5 })).toThrow(/one instant/);
  });
});
