import { describe, expect, it } from "vitest";
import type { Dispatch } from "../../src/protocol/queue-messages";
import { CATCH_UP_CAP, MISFIRE_GRACE_MS } from "../../src/schedule/misfire";
import { FIRE_CHUNK } from "../../src/shard/firing";
import { LEASE_ROW_RUNS, LEASE_RUNS_PER_TICK, type LeaseRow, leaseRowsOf, sliceDue } from "../../src/shard/leases";
import { TICK_BATCH } from "../../src/shard/ledger";

/**
 * The bounds on lease rows and on what one alarm tick looks at (src/shard/leases.ts), at a
 * scale the workerd test (test/workerd/lease-scale.test.ts) cannot afford: 100,000 leases
 * ending in the same second, as a mass dispatch loss after a burst of catch_up fires makes.
 */

const N = 100_000;
const leases = (n: number, prefix = "run"): Dispatch[] =>
  Array.from({ length: n }, (_, i) => ({ runId: `${prefix}-${String(i).padStart(6, "0")}`, fence: 1 }));

/** Ticks of `sliceDue` over `rows` until none is left, as the ledger applies them: what each tick took. */
function drain(rows: LeaseRow[]): Dispatch[][] {
  let due = rows;
  const ticks: Dispatch[][] = [];
  while (due.length > 0) {
    const slices = sliceDue(due);
    ticks.push(slices.flatMap((s) => s.take));
    const rest = slices.filter((s) => s.rest.length > 0).map((s) => ({ ...s.row, runs: s.rest }));
    due = [...rest, ...due.slice(slices.length)];
  }
  return ticks;
}

describe("lease rows and ticks, bounded", () => {
  it("100,000 leases of one second make rows of LEASE_ROW_RUNS at most, each lease in one row, in order", () => {
    const all = leases(N);
    const rows = leaseRowsOf(all);
    expect(Math.max(...rows.map((r) => r.length))).toBe(LEASE_ROW_RUNS);
    expect(rows.flat()).toEqual(all);
    // A row is well under the 2 MB a row may hold.
    expect(Math.max(...rows.map((r) => JSON.stringify(r.map((d) => [d.runId, d.fence])).length))).toBeLessThan(50_000);
  });

  it("100,000 due leases drain in ticks of LEASE_RUNS_PER_TICK at most, each looked at once", () => {
    const rows = leaseRowsOf(leases(N)).map((runs, i) => ({ dueAt: 1_000 + i, firstRun: runs[0]!.runId, runs }));
    const ticks = drain(rows);
    expect(Math.max(...ticks.map((t) => t.length))).toBeLessThanOrEqual(LEASE_RUNS_PER_TICK);
    expect(ticks.length).toBe(Math.ceil(N / LEASE_RUNS_PER_TICK));
    expect(ticks.flat()).toEqual(rows.flatMap((r) => r.runs));
  });

  it("a row written before rows had a cap, of 100,000 leases, is taken a tick's worth at a time", () => {
    const huge = { dueAt: 1_000, firstRun: "old-000000", runs: leases(N, "old") };
    const small = { dueAt: 2_000, firstRun: "new-000000", runs: leases(7, "new") };
    const ticks = drain([huge, small]);
    expect(Math.max(...ticks.map((t) => t.length))).toBeLessThanOrEqual(LEASE_RUNS_PER_TICK);
    expect(ticks.flat()).toEqual([...huge.runs, ...small.runs]);
  });

  it("one job's fires (catch_up's cap and a minute of on-time fires at one a second) fit a chunk and a tick", () => {
    expect(CATCH_UP_CAP + MISFIRE_GRACE_MS / 1_000).toBeLessThanOrEqual(FIRE_CHUNK);
    expect(FIRE_CHUNK).toBeLessThanOrEqual(TICK_BATCH);
    // A chunk's leases ending in one second fit in one row.
    expect(FIRE_CHUNK).toBeLessThanOrEqual(LEASE_ROW_RUNS);
  });
});
