import { describe, expect, it } from "vitest";
import { createJob, FAR_CRON, fireNow, hitsOf, listRuns, receiverPath, waitForRun } from "./helpers";

describe("a target's Retry-After", () => {
  it("of 999999999 seconds holds a retry no longer than the job's backoff.maxMs", async () => {
    // 503 with a Retry-After of ~31 years, then 200.
    const url = receiverPath("retry-after", "status=503,200&retryAfter=999999999,");
    const job = await createJob({
      schedule: FAR_CRON,
      target: { url },
      retry: { maxAttempts: 2, jitter: "none", backoff: { initialMs: 200, maxMs: 1_000, factor: 1 } },
    });
    await fireNow(job);
    const [run] = await listRuns(job.id);
    const done = await waitForRun(run!.id, ["succeeded"]);
    expect(done.attempts).toBe(2);
    const hits = await hitsOf(url);
    expect(hits).toHaveLength(2);
  });
});
