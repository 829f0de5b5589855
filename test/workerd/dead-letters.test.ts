import { createExecutionContext, createMessageBatch, env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { armFault, disarmFaults } from "../../src/faults";
import worker from "../../src/index";
import type { Run } from "../../src/model/run";
import type { DispatchMessage } from "../../src/protocol/queue-messages";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, FAR_CRON, fireNow, getRun, hitsOf, listRuns, makeRunDue, receiverPath, shardOf, waitForRun } from "./helpers";

type Page = { items: Run[]; nextCursor: string | null };

async function deadRun(name: string, query: string) {
  const url = receiverPath(name, query);
  const job = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 1 } });
  await fireNow(job);
  const [run] = await listRuns(job.id);
  return { job, url, run: await waitForRun(run!.id, ["dead", "failed"]) };
}

describe("dead letters", () => {
  it("lists dead and failed runs, newest first, for all jobs or one, paginated", async () => {
    const a = await deadRun("dl-a", "status=500");
    const b = await deadRun("dl-b", "status=404");
    const c = await deadRun("dl-c", "status=503");
    expect([a.run.state, b.run.state, c.run.state]).toEqual(["dead", "failed", "dead"]);

    const all: string[] = [];
    let cursor: string | null = null;
    do {
      const page = (await (await api(`/v1/dead-letters?limit=2${cursor ? `&cursor=${cursor}` : ""}`)).json()) as Page;
      all.push(...page.items.map((r) => r.id));
      cursor = page.nextCursor;
    } while (cursor);
    expect(all).toEqual([c.run.id, b.run.id, a.run.id]);

    const onlyB = (await (await api(`/v1/dead-letters?jobId=${b.job.id}`)).json()) as Page;
    expect(onlyB.items.map((r) => r.id)).toEqual([b.run.id]);
  });

  it("retry gives a dead run a fresh set of attempts under the same Idempotency-Key", async () => {
    const url = receiverPath("dl-retry", "status=500");
    // Retries an hour apart, so only the test moves them on.
    const retry = { maxAttempts: 2, jitter: "none", backoff: { initialMs: 3_600_000, maxMs: 3_600_000 } };
    const job = await createJob({ schedule: FAR_CRON, target: { url }, retry });
    await fireNow(job);
    const [run] = (await listRuns(job.id)) as [Run];
    await waitForRun(run.id, ["retry_wait"]);
    await makeRunDue(job, run.id);
    expect((await waitForRun(run.id, ["dead"])).attempts).toBe(2);

    const res = await api(`/v1/runs/${run.id}/retry`, { method: "POST" });
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ state: "running", error: null }); // dispatched again: its fresh first attempt began
    await waitForRun(run.id, ["retry_wait"]);
    const hits = await hitsOf(url);
    expect(hits.map((h) => h.headers["x-edgecron-attempt"])).toEqual(["1", "2", "1"]);
    expect(new Set(hits.map((h) => h.headers["idempotency-key"]))).toEqual(new Set([run.id]));
    expect((await getRun(run.id)).attemptLog).toHaveLength(3);
  });

  it("retrying a run that is not a dead letter → 409; an unknown run → 404", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("dl-ok") } });
    await fireNow(job);
    const [run] = await listRuns(job.id);
    await waitForRun(run!.id, ["succeeded"]);
    expect((await api(`/v1/runs/${run!.id}/retry`, { method: "POST" })).status).toBe(409);
    expect((await api(`/v1/runs/run_${job.id.slice(4)}_nope/retry`, { method: "POST" })).status).toBe(404);
  });

  it("a dispatch the queue dead-lettered leaves its attempt under way, sent again, and it later succeeds", async () => {
    const url = receiverPath("dl-queue");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    armFault("consumer.beforeExecute", Infinity, job.shard); // no consumer carries it out: the queue gives up
    let runId: string;
    try {
      await fireNow(job);
      const [run] = await listRuns(job.id);
      runId = run!.id;
      const body: DispatchMessage = { shard: job.shard, runId, fence: 1 };
      const batch = createMessageBatch<DispatchMessage>("edgecron-runs-dlq", [{ id: "d1", timestamp: new Date(), attempts: 6, body }]);
      await (worker as ExportedHandler<Env, DispatchMessage>).queue!(batch, env, createExecutionContext());
      expect(await getRun(runId)).toMatchObject({ state: "running", error: expect.stringContaining("dead-lettered") });
      const listed = (await (await api(`/v1/dead-letters?jobId=${job.id}`)).json()) as Page;
      expect(listed.items).toEqual([]);
      // A dead-lettered dispatch with a stale fence changes nothing.
      expect(await shardOf(job).abandonDispatches([{ runId, fence: 99 }])).toEqual(["stale"]);
      // Abandoned again: the run stays running (the same attempt) and its redispatches are counted.
      expect(await shardOf(job).abandonDispatches([{ runId, fence: 1 }])).toEqual(["redispatched"]);
      await vi.waitFor(
        async () => {
          const n = await runInDurableObject(
            shardOf(job),
            (_s: Shard, st) => st.storage.sql.exec("SELECT redispatches FROM runs WHERE id = ?", runId).one().redispatches,
          );
          expect(n).toBeGreaterThanOrEqual(2);
        },
        { timeout: 5_000, interval: 50 },
      );
      expect((await getRun(runId)).state).toBe("running");
      expect(await hitsOf(url)).toHaveLength(0);
    } finally {
      disarmFaults();
    }
    // Consumers work again: the next copy is carried out and the run succeeds, one outcome. Copies
    // the queue still held may call the target once more each: all of them the one attempt.
    await makeRunDue(job, runId);
    const done = await waitForRun(runId, ["succeeded"]);
    expect(done.attemptLog!.map((a) => a.outcome)).toEqual(["succeeded"]);
    const hits = await hitsOf(url);
    expect(hits.length).toBeGreaterThanOrEqual(1);
    expect(new Set(hits.map((h) => `${h.headers["idempotency-key"]} ${h.headers["x-edgecron-attempt"]}`))).toEqual(new Set([`${runId} 1`]));
  });
});
