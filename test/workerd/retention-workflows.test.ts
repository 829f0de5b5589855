import { runInDurableObject, SELF } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { stepRunId } from "../../src/model/ids";
import type { Job } from "../../src/model/job";
import type { Run } from "../../src/model/run";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, FAR_CRON, getRun, hitsOf, receiverPath, runRetention, shardOf } from "./helpers";

async function trigger(job: Job): Promise<Run> {
  const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
  expect(res.status, await res.clone().text()).toBe(202);
  return res.json();
}

/** Until the workflow run's steps are in these states. */
async function stepsReach(runId: string, states: Record<string, string>): Promise<Run> {
  return vi.waitFor(
    async () => {
      const run = await getRun(runId);
      expect(Object.fromEntries(run.steps!.map((s) => [s.id, s.state]))).toEqual(states);
      return run;
    },
    { timeout: 15_000, interval: 50 },
  );
}

async function rowsInShard(job: Job): Promise<string[]> {
  return runInDurableObject(shardOf(job), (_s: Shard, state) =>
    state.storage.sql
      .exec("SELECT id FROM runs WHERE job_id = ? ORDER BY id", job.id)
      .toArray()
      .map((r) => r.id as string),
  );
}

describe("retention and workflows", () => {
  it("never removes a step of an unfinished workflow run; once the run ends, its steps leave with it", async () => {
    const urls = {
      a: receiverPath("rw-a", `body=${encodeURIComponent(JSON.stringify({ rows: 3 }))}`),
      b: receiverPath("rw-b", "status=202"),
    };
    // Overlap allowed and one run kept: the older run, still running, is beyond the cap.
    const job = await createJob({
      schedule: FAR_CRON,
      overlap: "allow",
      retention: { maxRuns: 1 },
      steps: [
        { id: "a", target: { url: urls.a } },
        { id: "b", after: ["a"], target: { url: urls.b } },
      ],
    });
    const older = await trigger(job);
    await stepsReach(older.id, { a: "succeeded", b: "running" });
    const newer = await trigger(job);
    await stepsReach(newer.id, { a: "succeeded", b: "running" });
    expect(newer.scheduledAt > older.scheduledAt).toBe(true);

    await runRetention(shardOf(job));

    // The older run's finished step stays, its result with it: b's input and the graph need it.
    const kept = await getRun(older.id);
    expect(kept.steps!.find((s) => s.id === "a")).toMatchObject({ state: "succeeded", result: { rows: 3 } });
    expect(await rowsInShard(job)).toContain(stepRunId(older.id, "a"));

    // b ends: the run ends succeeded, and a was not started again.
    const [firstB] = await hitsOf(urls.b);
    expect(JSON.parse(firstB!.body)).toEqual({ runId: older.id, scheduledAt: older.scheduledAt, upstream: { a: { rows: 3 } } });
    const token = firstB!.headers["x-edgecron-completion-token"]!;
    const done = await SELF.fetch(`https://edgecron.test/v1/runs/${stepRunId(older.id, "b")}/complete`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token, ok: true }),
    });
    expect(done.status, await done.clone().text()).toBe(200);
    expect((await getRun(older.id)).state).toBe("succeeded");
    expect(await hitsOf(urls.a)).toHaveLength(2); // once per run

    // Finished and beyond the cap now: the run and both its steps leave; the newer run's stay.
    await runRetention(shardOf(job));
    expect(await rowsInShard(job)).toEqual([newer.id, stepRunId(newer.id, "a"), stepRunId(newer.id, "b")].sort());
  });
});
