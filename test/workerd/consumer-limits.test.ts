import { createExecutionContext, createMessageBatch, env, evictDurableObject, getQueueResult, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { MAX_OPEN_CONNECTIONS } from "../../src/consumer/connections";
import { armFault, disarmFault, disarmFaults } from "../../src/faults";
import worker from "../../src/index";
import type { Job } from "../../src/model/job";
import type { DispatchMessage } from "../../src/protocol/queue-messages";
import { dispatchLeaseMs } from "../../src/shard/lease-length";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, createTenant, FAR_CRON, getRun, hitsOf, makeRunDue, shardOf, waitForRun } from "./helpers";

/**
 * The consumer within production's limits, one invocation at a time: each test hands the
 * handler a batch itself, its runs held back from the real queue (every shard's send fails),
 * so no second invocation can add requests of its own.
 */
const consumer = worker as ExportedHandler<Env, DispatchMessage>;

afterEach(() => disarmFaults());

/** A receiver name shared by several jobs, so their requests are counted together. */
function sharedTarget(name: string): (query: string) => string {
  const path = `${env.RECEIVER_URL}/hit/${name}-${crypto.randomUUID()}`;
  return (query) => `${path}?${query}`;
}

async function peakOf(url: string): Promise<{ now: number; peak: number }> {
  const name = new URL(url).pathname.split("/")[2];
  return (await fetch(`${env.RECEIVER_URL}/peak/${name}`)).json();
}

/** `count` dispatched runs of a new job (one per year, backfilled), their dispatches held back: the messages to deliver. */
async function heldRuns(
  url: string,
  count: number,
  timeoutMs = 10_000,
  retry?: { maxAttempts: number },
  as: typeof api = api,
): Promise<{ job: Job; messages: DispatchMessage[] }> {
  const job = await createJob({ schedule: FAR_CRON, target: { url }, timeoutMs, ...(retry && { retry }) }, as);
  // Not scoped to the job's shard: a point is armed for one scope at a time, and a test holds several jobs.
  armFault("shard.queueSend", Infinity);
  const res = await api(`/v1/jobs/${job.id}/backfill`, {
    method: "POST",
    json: { from: "2000-01-01T00:00:00Z", to: `${1999 + count}-12-31T00:00:00Z` },
  });
  expect(res.status, await res.clone().text()).toBe(202);
  const runs = await runInDurableObject(
    shardOf(job),
    (_s: Shard, state) =>
      state.storage.sql.exec("SELECT id, fence, state FROM runs WHERE job_id = ? ORDER BY scheduled_at", job.id).toArray() as Array<{
        id: string;
        fence: number;
        state: string;
      }>,
  );
  expect(runs.map((r) => r.state)).toEqual(Array(count).fill("running")); // their attempts began with their dispatches
  return { job, messages: runs.map((r) => ({ shard: job.shard, runId: r.id, fence: r.fence })) };
}

function batchOf(messages: DispatchMessage[], attempts = 1) {
  return createMessageBatch<DispatchMessage>(
    "edgecron-runs",
    messages.map((body, i) => ({ id: `m${i}`, timestamp: new Date(), attempts, body })),
  );
}

async function sentOf(url: string): Promise<{ bytes: number; cutShort: number }> {
  const name = new URL(url).pathname.split("/")[2];
  return (await fetch(`${env.RECEIVER_URL}/sent/${name}`)).json();
}

async function attemptsOf(job: Job) {
  return runInDurableObject(
    shardOf(job),
    (_s: Shard, state) =>
      state.storage.sql
        .exec(
          "SELECT a.run_id, a.attempt, a.outcome FROM attempt_log a JOIN runs r ON r.id = a.run_id WHERE r.job_id = ? ORDER BY a.attempt",
          job.id,
        )
        .toArray() as Array<{ run_id: string; attempt: number; outcome: string }>,
  );
}

describe("the consumer within production's limits", () => {
  it(`never has more than ${MAX_OPEN_CONNECTIONS} target requests open at once, across all of a batch's shards`, async () => {
    const target = sharedTarget("slots");
    // Three jobs, so three shard groups share the invocation's connections.
    const held = await Promise.all([
      heldRuns(target("delayMs=300"), 8),
      heldRuns(target("delayMs=300"), 7),
      heldRuns(target("delayMs=300"), 6),
    ]);
    const messages = held.flatMap((h) => h.messages);
    expect(messages).toHaveLength(21);
    const batch = batchOf(messages);
    const ctx = createExecutionContext();
    await consumer.queue!(batch, env, ctx);
    expect((await getQueueResult(batch, ctx)).explicitAcks).toHaveLength(21);

    expect(await hitsOf(target(""))).toHaveLength(21);
    // Saturated (21 slow requests), yet never above the limit.
    expect((await peakOf(target(""))).peak).toBe(MAX_OPEN_CONNECTIONS);
    for (const { job } of held) expect((await attemptsOf(job)).every((a) => a.outcome === "succeeded")).toBe(true);
  });

  it("a fast run is recorded, and its message acked, while a slow one of its shard is still running", async () => {
    // One job, so one shard and one claim: the first request to arrive is slow, the second fast.
    const url = sharedTarget("slow-fast")("delayMs=2500,0");
    const { messages } = await heldRuns(url, 2);
    const batch = batchOf(messages);
    const ctx = createExecutionContext();
    const handled = consumer.queue!(batch, env, ctx);

    await expect.poll(async () => (await hitsOf(url)).length).toBe(2);
    const [slowRun, fastRun] = (await hitsOf(url)).map((h) => h.headers["idempotency-key"]!);
    await waitForRun(fastRun!, ["succeeded"]);
    expect((await getRun(slowRun!)).state).toBe("running");

    await handled;
    expect((await getQueueResult(batch, ctx)).explicitAcks.sort()).toEqual(["m0", "m1"]);
    const [slow, fast] = [await getRun(slowRun!), await getRun(fastRun!)];
    expect(slow.state).toBe("succeeded");
    expect(Date.parse(fast.finishedAt!)).toBeLessThan(Date.parse(slow.finishedAt!));
  });

  it("an attempt's timeout counts from when its request got a connection, not from the batch's start", async () => {
    // 6 slow requests and 7 that answer in 600 ms within a 1 s timeout: whichever start
    // first, at least one of the 7 waits ≥ 600 ms for a connection before its own 600 ms.
    const slow = await heldRuns(sharedTarget("busy")("delayMs=1500"), 6);
    const timed = await heldRuns(sharedTarget("timed")("delayMs=600"), 7, 1_000);
    const batch = batchOf([...slow.messages, ...timed.messages]);
    const ctx = createExecutionContext();
    await consumer.queue!(batch, env, ctx);
    expect((await getQueueResult(batch, ctx)).explicitAcks).toHaveLength(13);

    const outcomes = await attemptsOf(timed.job);
    expect(outcomes.map((a) => a.outcome)).toEqual(Array(7).fill("succeeded"));
  });

  it("an outcome the shard could not be told is kept on the queue for it: a success on the last attempt is recorded, never dead", async () => {
    const url = sharedTarget("unreported")("delayMs=0");
    // One attempt only: were the outcome lost, the lease would end the run dead.
    const { job, messages } = await heldRuns(url, 1, 10_000, { maxAttempts: 1 });
    const runId = messages[0]!.runId;
    // Every report call of the consumer's batch fails, retries included.
    armFault("consumer.report", Infinity, job.shard);
    const batch = batchOf(messages);
    const ctx = createExecutionContext();
    await consumer.queue!(batch, env, ctx);
    const result = await getQueueResult(batch, ctx);
    // The outcome went onto the queue: the dispatch's message is done with.
    expect(result.explicitAcks).toEqual(["m0"]);
    expect(result.retryMessages).toEqual([]);
    expect(await hitsOf(url)).toHaveLength(1);

    // The queue delivers the kept outcome; its consumer reports it to the shard.
    const done = await waitForRun(runId, ["succeeded", "dead"]);
    expect(done.state).toBe("succeeded");
    expect(await attemptsOf(job)).toEqual([{ run_id: runId, attempt: 1, outcome: "succeeded" }]);
    expect(await hitsOf(url)).toHaveLength(1);
  });

  it("a target streaming a huge error body has only the error's start read, and the batch's other runs finish", async () => {
    const HUGE = 64 * 1024 * 1024;
    const huge = sharedTarget("huge-500")(`status=500&streamBytes=${HUGE}`);
    const others = sharedTarget("beside-huge")("delayMs=0");
    const hugeRuns = await heldRuns(huge, 2);
    const otherRuns = await heldRuns(others, 5);
    const batch = batchOf([...hugeRuns.messages, ...otherRuns.messages]);
    const ctx = createExecutionContext();
    await consumer.queue!(batch, env, ctx);
    expect((await getQueueResult(batch, ctx)).explicitAcks).toHaveLength(7);

    for (const { runId } of hugeRuns.messages) {
      const run = await getRun(runId);
      expect(run.status).toBe(500);
      expect(run.error).toBe(`HTTP 500: ${"x".repeat(500)}`);
    }
    // Each body was let go of early: what the receiver wrote is the sockets' buffers, not 64 MiB.
    const sent = await sentOf(huge);
    expect(sent.cutShort, JSON.stringify(sent)).toBe(2);
    expect(sent.bytes).toBeLessThan(HUGE / 4);
    expect((await attemptsOf(otherRuns.job)).map((a) => a.outcome)).toEqual(Array(5).fill("succeeded"));
  });

  it("one tenant's slow targets leave another tenant's run its slot: it is called before any of theirs answers", async () => {
    const [a, b] = [await createTenant(), await createTenant()];
    const slow = sharedTarget("tarpit")("delayMs=4000");
    const fast = sharedTarget("neighbour")("delayMs=0");
    const tarpit = await heldRuns(slow, 8, 10_000, undefined, a.api);
    const neighbour = await heldRuns(fast, 1, 10_000, undefined, b.api);
    // The tarpit's dispatches first in the batch, as a first come, first served pool would serve them.
    const batch = batchOf([...tarpit.messages, ...neighbour.messages]);
    const ctx = createExecutionContext();
    const handled = consumer.queue!(batch, env, ctx);

    await expect.poll(async () => (await hitsOf(fast)).length).toBe(1);
    // B's request was made while every one of A's was still open: none had answered.
    const { now } = await peakOf(slow);
    expect((await hitsOf(slow)).length - now, "A's requests answered before B's was made").toBe(0);

    await handled;
    expect((await getQueueResult(batch, ctx)).explicitAcks).toHaveLength(9);
    expect((await attemptsOf(tarpit.job)).map((x) => x.outcome)).toEqual(Array(8).fill("succeeded"));
    expect((await peakOf(slow)).peak).toBeLessThanOrEqual(MAX_OPEN_CONNECTIONS);
  });
  it("a target in a full batch is called once: the leases of orders waiting for a connection are renewed, not resent", async () => {
    // Scaled from 100 dispatches to 10 s targets: 60 to targets of ~0.9 s (2 s timeouts) share
    // 6 connections, so the last start ~9 s after the batch's. Their leases are what a claim
    // timeout of 0 gives (2 s + the grace: 7 s), so the tail would outlive them while it waits.
    const url = sharedTarget("full-batch")("delayMs=900");
    const timeoutMs = 2_000;
    const { job, messages } = await heldRuns(url, 60, timeoutMs);
    const leaseUntil = Date.now() + dispatchLeaseMs(0, 0, timeoutMs);
    await runInDurableObject(shardOf(job), async (_s: Shard, state) => {
      const sql = state.storage.sql;
      sql.exec("UPDATE runs SET lease_until = ? WHERE job_id = ? AND state = 'running'", leaseUntil, job.id);
      sql.exec(
        "INSERT INTO leases (due_at, first_run, runs) SELECT ?1, MIN(id), json_group_array(json_array(id, fence)) FROM runs WHERE job_id = ?2 AND state = 'running'",
        leaseUntil,
        job.id,
      );
      await state.storage.setAlarm(leaseUntil);
    });
    // The held dispatches are forgotten with the shard's memory; what it sends from now on (a
    // lease that ended) reaches the real queue and its consumer.
    await evictDurableObject(shardOf(job));
    disarmFault("shard.queueSend");

    const batch = batchOf(messages);
    const ctx = createExecutionContext();
    await consumer.queue!(batch, env, ctx);
    expect((await getQueueResult(batch, ctx)).explicitAcks).toHaveLength(60);
    for (const { runId } of messages) await waitForRun(runId, ["succeeded", "dead", "failed"]);

    const calls = Map.groupBy(await hitsOf(url), (h) => h.headers["idempotency-key"]!);
    expect(messages.map((m) => calls.get(m.runId)?.length ?? 0)).toEqual(Array(60).fill(1));
    expect((await attemptsOf(job)).map((a) => a.outcome)).toEqual(Array(60).fill("succeeded"));
    const redispatched = await runInDurableObject(
      shardOf(job),
      (_s: Shard, state) => state.storage.sql.exec("SELECT COUNT(*) AS n FROM runs WHERE job_id = ? AND redispatches > 0", job.id).one().n,
    );
    expect(redispatched).toBe(0);
  });
  it("a dispatch whose lease ended on its way (a queue's backlog) is not made when it comes: the copy sent again calls the target once", async () => {
    const url = sharedTarget("late-order")("delayMs=1500");
    const { job, messages } = await heldRuns(url, 1, 5_000);
    const runId = messages[0]!.runId;
    // The dispatch as the shard sent it, with its lease's end (its order too large for a message, say).
    const { lease_until } = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT lease_until FROM runs WHERE id = ?", runId).one(),
    );
    const late = messages.map((m) => ({ ...m, leaseUntil: lease_until as number }));
    await evictDurableObject(shardOf(job));
    disarmFault("shard.queueSend");
    // It is late: its lease ends, the shard sends it again, and the real queue's consumer calls the target.
    await makeRunDue(job, runId);
    await expect.poll(async () => (await hitsOf(url)).length).toBe(1);

    // The first copy comes while the second's call is under way.
    const batch = batchOf(late);
    const ctx = createExecutionContext();
    await consumer.queue!(batch, env, ctx);
    expect((await getQueueResult(batch, ctx)).explicitAcks).toEqual(["m0"]);
    await waitForRun(runId, ["succeeded"]);
    expect(await hitsOf(url)).toHaveLength(1);
    expect(await attemptsOf(job)).toEqual([{ run_id: runId, attempt: 1, outcome: "succeeded" }]);
  });
});
