import { describe, expect, it } from "vitest";
import { PRICES } from "../../src/cost/prices";
import { NO_COUNTS, perRun, usdOf, usdPerMillionRuns } from "../../src/cost/usd";

describe("cost arithmetic", () => {
  it("prices each count at its list price per million", () => {
    const million = { ...NO_COUNTS };
    expect(usdOf({ ...million, sqlRowsWritten: 1_000_000 }, PRICES)).toBeCloseTo(1.0, 12);
    expect(usdOf({ ...million, sqlRowsRead: 1_000_000 }, PRICES)).toBeCloseTo(0.001, 12);
    expect(usdOf({ ...million, d1RowsWritten: 2_000_000 }, PRICES)).toBeCloseTo(2.0, 12);
    expect(usdOf({ ...million, doRequests: 1_000_000 }, PRICES)).toBeCloseTo(0.15, 12);
    // A message is written, read and deleted: three operations at $0.40 a million.
    expect(usdOf({ ...million, queueMessages: 1_000_000 }, PRICES)).toBeCloseTo(1.2, 12);
  });

  it("a run of 20 rows written, 40 read, 4 requests and a message costs $21.84 a million", () => {
    const counts = { doRequests: 4, sqlRowsRead: 40, sqlRowsWritten: 20, queueMessages: 1, d1RowsRead: 0, d1RowsWritten: 0 };
    const runs = 1;
    // 20 × 1.00 + 40 × 0.001 + 4 × 0.15 + 3 × 0.40 = 21.84 per million runs
    expect(usdPerMillionRuns(counts, runs, PRICES)).toBeCloseTo(21.84, 9);
    const ten = Object.fromEntries(Object.entries(counts).map(([k, v]) => [k, v * 10])) as typeof counts;
    expect(usdPerMillionRuns(ten, 10, PRICES)).toBeCloseTo(21.84, 9);
    expect(perRun(ten, 10)).toEqual(counts);
  });

  it("no finished run, no figure per run", () => {
    expect(usdPerMillionRuns({ ...NO_COUNTS, sqlRowsWritten: 5 }, 0, PRICES)).toBeNull();
    expect(perRun(NO_COUNTS, 0)).toBeNull();
  });
});
