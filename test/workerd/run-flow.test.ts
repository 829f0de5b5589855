import {
  createExecutionContext,
  createMessageBatch,
  env,
  getQueueResult,
  runDurableObjectAlarm,
  runInDurableObject,
} from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { armFault, disarmFault } from "../../src/faults";
import worker from "../../src/index";
import type { Job } from "../../src/model/job";
import type { DispatchMessage } from "../../src/protocol/queue-messages";
import { MAX_REDISPATCHES } from "../../src/shard/leases";
import type { Shard } from "../../src/shard/shard";
import {
  api,
  createJob,
  expireAttempt,
  FAR_CRON,
  fireInFlight,
  fireNow,
  getRun,
  hitsOf,
  listRuns,
  makeRunDue,
  receiverPath,
  shardOf,
  waitForRun,
} from "./helpers";

/** The Worker as the runtime sees it (all handler parameters). */
const consumer = worker as ExportedHandler<Env, DispatchMessage>;

describe("alarm → queue → consumer → recorded result", () => {
  it("fires a due job, calls the target with the run's headers, and records success", async () => {
    const url = receiverPath("flow", "status=200");
    const job = await createJob({ schedule: FAR_CRON, target: { url, headers: { "X-Team": "data" }, body: { report: "daily" } } });
    const due = await fireNow(job);

    const [run] = await listRuns(job.id);
    expect(run).toMatchObject({ jobId: job.id, trigger: "schedule", scheduledAt: new Date(due).toISOString() });
    const done = await waitForRun(run!.id, ["succeeded"]);
    expect(done).toMatchObject({ status: 200, attempts: 1, error: null });
    expect(done.startedAt).not.toBeNull();
    expect(done.finishedAt).not.toBeNull();

    const hits = await hitsOf(url);
    expect(hits).toHaveLength(1);
    expect(hits[0]!.method).toBe("POST");
    expect(hits[0]!.headers).toMatchObject({
      "idempotency-key": run!.id,
      "x-edgecron-run-id": run!.id,
      "x-edgecron-job-id": job.id,
      "x-edgecron-attempt": "1",
      "x-edgecron-scheduled-at": new Date(due).toISOString(),
      "x-team": "data",
      "content-type": "application/json",
    });
    expect(JSON.parse(hits[0]!.body)).toEqual({ report: "daily" });
  });

  it("moves the job to its next fire after firing", async () => {
    const job = await createJob({ schedule: { every: "1h" }, target: { url: receiverPath("next") } });
    const due = await fireNow(job);
    const res = await api(`/v1/jobs/${job.id}`);
    const after = (await res.json()) as { nextRunAt: string };
    // On the interval's grid (createdAt + k·1h), strictly after the fire.
    const next = Date.parse(after.nextRunAt);
    expect(next).toBeGreaterThan(due);
    expect((next - Date.parse(job.createdAt)) % 3_600_000).toBe(0);
  });

  it("an alarm that runs again for the same instant makes no second run (deterministic run ids)", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("twice") } });
    const stub = shardOf(job);
    const due = Date.now() - 1;
    // As if the alarm ran, then ran again from the same state (a retried alarm after a crash).
    for (let i = 0; i < 2; i++) {
      await runInDurableObject(stub, (_s: Shard, state) => {
        state.storage.sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", due, job.id);
        return state.storage.setAlarm(due);
      });
      await runDurableObjectAlarm(stub);
    }
    const runs = await listRuns(job.id);
    expect(runs.filter((r) => r.scheduledAt === new Date(due).toISOString())).toHaveLength(1);
  });

  it("a duplicated queue delivery is executed and recorded once", async () => {
    const url = receiverPath("dup");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    await fireNow(job);
    const [run] = await listRuns(job.id);
    await waitForRun(run!.id, ["succeeded"]);

    // Deliver the same dispatch again, twice in one batch, as an at-least-once queue may.
    const body: DispatchMessage = { shard: job.shard, runId: run!.id, fence: 1 };
    const batch = createMessageBatch<DispatchMessage>("edgecron-runs", [
      { id: "a", timestamp: new Date(), attempts: 2, body },
      { id: "b", timestamp: new Date(), attempts: 2, body },
    ]);
    const ctx = createExecutionContext();
    await consumer.queue!(batch, env, ctx);
    const result = await getQueueResult(batch, ctx);
    expect(result.explicitAcks.sort()).toEqual(["a", "b"]);

    expect(await hitsOf(url)).toHaveLength(1);
    const after = await getRun(run!.id);
    expect(after).toMatchObject({ state: "succeeded", attempts: 1 });
    expect(after.attemptLog).toHaveLength(1);
  });

  it("two deliveries of a dispatch in one batch call its target once", async () => {
    const url = receiverPath("race");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    // Fire with its dispatch lost (no real delivery races this one), then deliver it twice in one hand-made batch.
    await fireInFlight(job);
    const [run] = await listRuns(job.id);
    const body: DispatchMessage = { shard: job.shard, runId: run!.id, fence: 1 };
    const batch = createMessageBatch<DispatchMessage>("edgecron-runs", [
      { id: "x", timestamp: new Date(), attempts: 1, body },
      { id: "y", timestamp: new Date(), attempts: 1, body },
    ]);
    await consumer.queue!(batch, env, createExecutionContext());
    await waitForRun(run!.id, ["succeeded"]);
    expect(await hitsOf(url)).toHaveLength(1);
    expect((await getRun(run!.id)).attemptLog).toHaveLength(1);
  });
});

describe("failures and retries", () => {
  it("retries a 5xx with the same Idempotency-Key, then gives up as dead", async () => {
    const url = receiverPath("fail", "status=503");
    // Retries an hour apart, so only the test moves them on.
    const retry = { maxAttempts: 2, jitter: "none", backoff: { initialMs: 3_600_000, maxMs: 3_600_000 } };
    const job = await createJob({ schedule: FAR_CRON, target: { url }, retry });
    await fireNow(job);
    const [run] = await listRuns(job.id);
    const waiting = await waitForRun(run!.id, ["retry_wait"]);
    expect(waiting).toMatchObject({ status: 503, attempts: 1 });

    await makeRunDue(job, run!.id);
    const dead = await waitForRun(run!.id, ["dead"]);
    expect(dead).toMatchObject({ status: 503, attempts: 2 });
    expect(dead.attemptLog!.map((a) => a.outcome)).toEqual(["failed", "failed"]);

    const hits = await hitsOf(url);
    expect(hits.map((h) => h.headers["x-edgecron-attempt"])).toEqual(["1", "2"]);
    expect(new Set(hits.map((h) => h.headers["idempotency-key"]))).toEqual(new Set([run!.id]));
  });

  it("fails at once on a non-retryable 4xx", async () => {
    const url = receiverPath("gone", "status=404");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 5 } });
    await fireNow(job);
    const [run] = await listRuns(job.id);
    const failed = await waitForRun(run!.id, ["failed"]);
    expect(failed).toMatchObject({ status: 404, attempts: 1 });
    expect(failed.error).toContain("HTTP 404");
  });

  it("an attempt whose lease expires with no outcome is sent again, then timed out and retried; the zombie's late outcome is stale", async () => {
    const url = receiverPath("lease");
    // A retry delay of its own, not a jittered one that may end (and start the retry) before the late report.
    const retry = { maxAttempts: 3, jitter: "none", backoff: { initialMs: 600_000, maxMs: 600_000 } };
    const job = await createJob({ schedule: FAR_CRON, target: { url }, retry });
    await fireInFlight(job);
    const [run] = await listRuns(job.id);
    const stub = shardOf(job);
    // No copy of the dispatch reaches a consumer: each lease that ends sends it again, the last times it out.
    expect(await expireAttempt(job, run!.id)).toMatchObject({ state: "retry_wait", fence: 1, redispatches: MAX_REDISPATCHES });
    const after = await getRun(run!.id);
    expect(after.attemptLog!.map((a) => a.outcome)).toEqual(["timed_out"]);

    // A consumer that got a copy after all reports late: stale, nothing changes.
    const late = await stub.report([{ runId: run!.id, fence: 1, ok: true, status: 200, error: null }]);
    expect(late).toEqual(["stale"]);
    expect((await getRun(run!.id)).state).toBe("retry_wait");

    // The retry goes out under fence 2 and succeeds; the copies of attempt 1 the shard kept are not sent now.
    await makeRunDue(job, run!.id);
    const done = await waitForRun(run!.id, ["succeeded"]);
    expect(done.attemptLog!.map((a) => a.outcome)).toEqual(["timed_out", "succeeded"]);
    const hits = await hitsOf(url);
    expect(hits.map((h) => h.headers["x-edgecron-attempt"])).toEqual(["2"]);
  });
});

describe("a lost report on the last attempt", () => {
  /** A job with one attempt whose dispatch never reaches a consumer: its lease runs out, the run ends dead. */
  async function expiredLastAttempt(name: string) {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath(name) }, retry: { maxAttempts: 1 } });
    await fireInFlight(job);
    const [run] = await listRuns(job.id);
    const stub = shardOf(job);
    await expireAttempt(job, run!.id);
    expect(await getRun(run!.id)).toMatchObject({ state: "dead", attemptLog: [{ outcome: "timed_out" }] });
    return { job, run: run!, stub };
  }
  it("a late success of the timed-out last attempt is noted on it and refused: the dead run and its dead letter stand", async () => {
    const { run, stub } = await expiredLastAttempt("late-ok");
    // The run went dead, and with it came what a dead run brings (its failure chain, its dead
    // notification, a step of its job's auto-pause streak): an outcome overwritten now would
    // contradict them, so only the current attempt's outcome counts.
    expect(await stub.report([{ runId: run.id, fence: 1, ok: true, status: 200, error: null }])).toEqual(["stale"]);
    const after = await getRun(run.id);
    expect(after).toMatchObject({ state: "dead", attempts: 1 });
    expect(after.attemptLog).toMatchObject([{ outcome: "timed_out", late: "HTTP 200" }]);
    const listed = (await (await api(`/v1/dead-letters?jobId=${run.jobId}`)).json()) as { items: Array<{ id: string }> };
    expect(listed.items.map((r) => r.id)).toEqual([run.id]);
  });

  it("a late failure, a late success after the window, or one after a revival leaves the run as it is", async () => {
    const failed = await expiredLastAttempt("late-fail");
    expect(await failed.stub.report([{ runId: failed.run.id, fence: 1, ok: false, status: 500, error: "HTTP 500" }])).toEqual(["stale"]);
    expect((await getRun(failed.run.id)).state).toBe("dead");

    const old = await expiredLastAttempt("late-old");
    await runInDurableObject(old.stub, (_s: Shard, state) => {
      state.storage.sql.exec("UPDATE runs SET finished_at = ? WHERE id = ?", Date.now() - 11 * 60_000, old.run.id);
    });
    expect(await old.stub.report([{ runId: old.run.id, fence: 1, ok: true, status: 200, error: null }])).toEqual(["stale"]);
    expect((await getRun(old.run.id)).state).toBe("dead");

    const revived = await expiredLastAttempt("late-revived");
    expect((await api(`/v1/runs/${revived.run.id}/retry`, { method: "POST" })).status).toBe(202);
    expect(await revived.stub.report([{ runId: revived.run.id, fence: 1, ok: true, status: 200, error: null }])).toEqual(["stale"]);
    // The revival's own attempt (fence 2) decides the run.
    const done = await waitForRun(revived.run.id, ["succeeded"]);
    expect(done.attemptLog!.map((a) => a.outcome)).toEqual(["timed_out", "succeeded"]);
  });
});

describe("a slow queue", () => {
  /** The run's row as its shard holds it. */
  const rowOf = (job: { shard: string }, runId: string) =>
    runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT state, fence, lease_until, redispatches FROM runs WHERE id = ?", runId).one(),
    );

  /**
   * The run's lease ends and the alarm sends its dispatch again. The runtime may run the past-due
   * alarm itself, concurrently with the test's, so this waits for the redispatch to be written.
   */
  async function redispatched(job: Job, runId: string, times: number) {
    await makeRunDue(job, runId);
    return vi.waitFor(
      async () => {
        const row = await rowOf(job, runId);
        if (row.redispatches !== times) throw new Error(`redispatched ${row.redispatches} times, not ${times}`);
        return row;
      },
      { timeout: 5_000, interval: 20 },
    );
  }

  /**
   * A job fired once while the queue takes no dispatch (none reaches a consumer until the test
   * delivers it): `check` gets the job and its run's id; the queue takes dispatches again afterwards.
   */
  async function withHeldDispatch(url: string, check: (job: Job, runId: string) => Promise<void>) {
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    armFault("shard.queueSend", Infinity, job.shard);
    try {
      await fireNow(job);
      const [run] = await listRuns(job.id);
      await check(job, run!.id);
      return { job, runId: run!.id };
    } finally {
      disarmFault("shard.queueSend", job.shard);
    }
  }

  it("a dispatch delivered after its run was sent again still runs it, once", async () => {
    const url = receiverPath("slow-queue");
    const { job, runId } = await withHeldDispatch(url, async (job, runId) => {
      // Two leases end: the shard sends the dispatch again each time, under the same fence, waiting longer.
      const once = await redispatched(job, runId, 1);
      expect(once).toMatchObject({ state: "running", fence: 1, redispatches: 1 });
      const twice = await redispatched(job, runId, 2);
      expect(twice).toMatchObject({ state: "running", fence: 1, redispatches: 2 });
      expect(Number(twice.lease_until) - Number(once.lease_until)).toBeGreaterThan(1.9 * 60_000); // the queue's allowance doubled
    });
    // The first dispatch finally arrives, twice, as a slow at-least-once queue may deliver it.
    const body: DispatchMessage = { shard: job.shard, runId, fence: 1 };
    const batch = createMessageBatch<DispatchMessage>("edgecron-runs", [
      { id: "old-a", timestamp: new Date(), attempts: 1, body },
      { id: "old-b", timestamp: new Date(), attempts: 1, body },
    ]);
    await consumer.queue!(batch, env, createExecutionContext());
    const done = await waitForRun(runId, ["succeeded"]);
    expect(done.attemptLog!.map((a) => a.outcome)).toEqual(["succeeded"]);
    // The copies the shard kept while the queue refused them are not sent now: the attempt has its outcome.
    await new Promise((r) => setTimeout(r, 2_500));
    expect(await hitsOf(url)).toHaveLength(1);
    expect(await shardOf(job).open([{ runId, fence: 1 }])).toEqual([{ result: "stale", runId, fence: 1 }]);
  });

  it("a dispatch the queue dead-lettered is sent again at once", async () => {
    await withHeldDispatch(receiverPath("slow-dead-lettered"), async (job, runId) => {
      expect(await shardOf(job).abandonDispatches([{ runId, fence: 1 }])).toEqual(["redispatched"]);
      expect(await rowOf(job, runId)).toMatchObject({ state: "running", fence: 1, redispatches: 1 });
    });
  });

  it("the queue's allowance doubles with each redispatch, up to MAX_WAIT_FACTOR claim timeouts; after MAX_REDISPATCHES the attempt times out", async () => {
    await withHeldDispatch(receiverPath("slow-cap"), async (job, runId) => {
      const leases: number[] = [];
      for (let i = 0; i < MAX_REDISPATCHES; i++) leases.push(Number((await redispatched(job, runId, i + 1)).lease_until) - Date.now());
      // Each lease is the queue's allowance plus the same attempt timeout and grace: the allowances go 2, 4, 4, 4, 4 minutes.
      const steps = leases.slice(1).map((l, i) => Math.round((l - leases[i]!) / 60_000) || 0); // (|| 0: no -0)
      expect(steps).toEqual([2, 0, 0, 0]);
      await makeRunDue(job, runId);
      await vi.waitFor(async () => expect((await getRun(runId)).attemptLog!.map((a) => a.outcome)).toEqual(["timed_out"]), {
        timeout: 5_000,
        interval: 20,
      });
    });
  });
});
