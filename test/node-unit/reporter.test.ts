import { describe, expect, it } from "vitest";
import { OutcomeReporter, REPORT_GROUP_SIZE, REPORT_TRIES, REPORT_WINDOW_MS } from "../../src/consumer/reporter";
import type { Outcome } from "../../src/protocol/queue-messages";
import type { ShardApi } from "../../src/protocol/shard-rpc";

const outcome = (i: number): Outcome => ({ runId: `run_${i}`, fence: 1, ok: true, status: 200, error: null });

/** A shard's report call, recording each group it is sent; `failures` calls fail first. */
function shardReceiving(failures = 0) {
  const groups: string[][] = [];
  let failed = 0;
  const stub = {
    async report(outcomes: Outcome[]) {
      if (failed < failures) {
        failed++;
        throw new Error("shard restarting");
      }
      groups.push(outcomes.map((o) => o.runId));
      return outcomes.map(() => "recorded" as const);
    },
  };
  return { stub: stub as unknown as ShardApi, groups };
}

/** Where a reporter keeps what it could not report: nothing is kept unless a test says so. */
const keepNothing = async () => {
  throw new Error("nothing should be kept");
};

describe("OutcomeReporter: a shard's outcomes, reported as they finish", () => {
  it("sends the outcomes that finish together in one call, not one per ten: each call is a transaction and a settle on the shard", async () => {
    const { stub, groups } = shardReceiving();
    const reporter = new OutcomeReporter(stub, "shard-0", 85, keepNothing);
    const reported = await Promise.all(Array.from({ length: 85 }, (_, i) => reporter.report(outcome(i))));
    expect(reported.every(Boolean)).toBe(true);
    expect(groups).toHaveLength(1);
    expect(groups[0]).toHaveLength(85);
  });

  it("never sends more than REPORT_GROUP_SIZE outcomes in one call", async () => {
    const { stub, groups } = shardReceiving();
    const n = REPORT_GROUP_SIZE * 2 + 5;
    const reporter = new OutcomeReporter(stub, "shard-0", n, keepNothing);
    await Promise.all(Array.from({ length: n }, (_, i) => reporter.report(outcome(i))));
    expect(groups.map((g) => g.length)).toEqual([REPORT_GROUP_SIZE, REPORT_GROUP_SIZE, 5]);
  });

  it("does not hold a finished outcome for a slow neighbour longer than the window", async () => {
    const { stub, groups } = shardReceiving();
    const reporter = new OutcomeReporter(stub, "shard-0", 2, keepNothing);
    const started = Date.now();
    // The second attempt is still running: the first goes alone once the window has passed.
    await expect(reporter.report(outcome(0))).resolves.toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(REPORT_WINDOW_MS - 5);
    expect(groups).toEqual([["run_0"]]);
    await reporter.report(outcome(1));
    expect(groups).toEqual([["run_0"], ["run_1"]]);
  });

  it("tries a failed report again; once REPORT_TRIES calls failed the outcomes are kept for the shard, never thrown away", async () => {
    const recovering = shardReceiving(REPORT_TRIES - 1);
    await expect(new OutcomeReporter(recovering.stub, "shard-0", 1, keepNothing).report(outcome(0))).resolves.toBe(true);
    expect(recovering.groups).toEqual([["run_0"]]);

    const down = shardReceiving(REPORT_TRIES);
    const kept: Outcome[][] = [];
    const keep = async (outcomes: Outcome[]) => kept.push(outcomes);
    await expect(new OutcomeReporter(down.stub, "shard-0", 1, keep).report(outcome(0))).resolves.toBe(true);
    expect(down.groups).toEqual([]);
    expect(kept).toEqual([[outcome(0)]]);
  });

  it("answers false when the outcomes can be neither reported nor kept, so the messages go back to the queue", async () => {
    const down = shardReceiving(REPORT_TRIES);
    await expect(new OutcomeReporter(down.stub, "shard-0", 1, keepNothing).report(outcome(0))).resolves.toBe(false);
    expect(down.groups).toEqual([]);
  });
});
