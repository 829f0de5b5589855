import { runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { truncationMarker } from "../../src/consumer/kept-outcomes";
import { REPORT_TRIES } from "../../src/consumer/reporter";
import { armFault, disarmFaults } from "../../src/faults";
import { stepRunId } from "../../src/model/ids";
import type { Shard } from "../../src/shard/shard";
import { MAX_RESULT_BYTES } from "../../src/workflow/steps";
import { api, createJob, FAR_CRON, hitsOf, receiverPath, shardOf, waitForRun } from "./helpers";

afterEach(() => disarmFaults());

describe("outcomes kept on the queue for a shard that could not be told", () => {
  it("a step's result whose outcome is larger than a queue message is cut, marked, and recorded: one call, the run succeeds", async () => {
    // 64 KiB of a control character: within a step's result, yet ~384 KB as JSON, three queue messages' worth.
    const chars = MAX_RESULT_BYTES;
    const urls = { a: receiverPath("kept-a", `bodyBytes=${chars}&bodyChar=%01`), b: receiverPath("kept-b") };
    const job = await createJob({
      schedule: FAR_CRON,
      steps: [
        { id: "a", target: { url: urls.a } },
        { id: "b", after: ["a"], target: { url: urls.b } },
      ],
    });
    // a runs alone: only its reports fail, all of them, so its outcome goes onto the queue.
    armFault("consumer.report", REPORT_TRIES, job.shard);
    const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
    expect(res.status).toBe(202);
    const { id: runId } = (await res.json()) as { id: string };

    const run = await waitForRun(runId, ["succeeded", "failed"], 20_000);
    expect(run.state).toBe("succeeded");
    expect(await hitsOf(urls.a)).toHaveLength(1);
    expect(await hitsOf(urls.b)).toHaveLength(1);
    const { result } = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT result FROM runs WHERE id = ?", stepRunId(runId, "a")).one(),
    );
    const kept = result as string;
    expect(new TextEncoder().encode(JSON.stringify(kept)).length).toBeLessThan(128_000);
    const keptChars = kept.indexOf("\n[edgecron");
    expect(keptChars).toBeGreaterThan(0);
    expect(kept).toBe("\u0001".repeat(keptChars) + truncationMarker(keptChars, chars));
  });
});
