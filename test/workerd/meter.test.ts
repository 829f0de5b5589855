import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";

describe("the shard's cost meter", () => {
  it("writes a minute's counts as one row, however many operations they hold", async () => {
    const stub = env.SHARD.get(env.SHARD.idFromName(`meter-${crypto.randomUUID()}`));
    // Nothing is due on an empty shard, so each call writes the tally at its end (an idle
    // object may be evicted): counts of the call and of its settle step, two operations.
    for (let i = 0; i < 3; i++) await stub.applyJobs([]);
    const { cost } = await stub.metrics(60_000);
    expect(cost.byOperation.applyJobs?.calls).toBe(3);
    expect(Object.keys(cost.byOperation)).toEqual(expect.arrayContaining(["applyJobs", "settle"]));
    // Three writes, a row each (the window's own write is carried to the next): a row per
    // operation would be six.
    expect(cost.meter.rowsWritten).toBe(3);
  });
});
