import { createExecutionContext, createMessageBatch, env, getQueueResult, runInDurableObject } from "cloudflare:test";
import fc from "fast-check";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { unpack } from "../../src/consumer/deliveries";
import { armFault, disarmFaults } from "../../src/faults";
import { FAILURES_TO_OPEN } from "../../src/gate/breaker";
import worker from "../../src/index";
import { scheduledRunId } from "../../src/model/ids";
import type { DispatchPack, QueueMessage } from "../../src/protocol/queue-messages";
import type { JobDefinition } from "../../src/protocol/stored-rows";
import { DISPATCHES_PER_MESSAGE } from "../../src/shard/dispatch-packs";
import type { Shard } from "../../src/shard/shard";
import { gateStub } from "../../src/stubs";
import { definition, FAR_CRON, hitsOf, receiverPath, specLike } from "./helpers";

/**
 * Dispatches travel several to a queue message (src/shard/dispatch-packs.ts), and the consumer
 * settles each on its own while the Queue acks or retries the message whole
 * (src/consumer/deliveries.ts). One dispatch to a message, as shards sent them before, is
 * still taken: run-flow.test.ts and fault-injection.test.ts deliver that shape. Each test has a
 * shard of its own (alarms are not reset between tests).
 */

const consumer = worker as ExportedHandler<Env, QueueMessage>;

afterEach(() => disarmFaults());

/**
 * A shard of its own holding one job per target URL, all fired at one instant (just past) by
 * one alarm. With `held`, every send of the shard is refused for the rest of the test, so its
 * runs stay running, no consumer carrying them out, for a hand-made delivery and the real Queue never races it.
 */
async function firedTogether(urls: string[], { held = false } = {}) {
  const name = `packs-${crypto.randomUUID()}`;
  const stub = env.SHARD.get(env.SHARD.idFromName(name));
  const now = Date.now();
  const jobs: JobDefinition[] = [];
  for (const url of urls) jobs.push(definition(await specLike(FAR_CRON, url), now));
  await stub.applyJobs(jobs);
  // Deleting the jobs cancels whatever run of theirs is left: nothing of this test runs later.
  onTestFinished(async () => {
    disarmFaults();
    await stub.applyJobs(jobs.map((j) => ({ ...j, version: 2, deleted: true })));
  });
  if (held) armFault("shard.queueSend", Infinity, name);
  const due = Date.now() - 1;
  await runInDurableObject(stub, async (shard: Shard, state) => {
    state.storage.sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1", due);
    await shard.alarm();
  });
  const runIds = jobs.map((j) => scheduledRunId(j.id, due));
  return { name, stub, runIds };
}

async function runStates(stub: DurableObjectStub<Shard>, runIds: string[]): Promise<string[]> {
  return runInDurableObject(stub, (_s: Shard, state) =>
    runIds.map((id) => state.storage.sql.exec("SELECT state FROM runs WHERE id = ?", id).one().state as string),
  );
}

/** Queue messages the shard has sent (its cost meter's count). */
async function messagesSent(stub: DurableObjectStub<Shard>): Promise<number> {
  const metrics = await stub.metrics(3_600_000);
  return Object.values(metrics.cost.byOperation).reduce((n, op) => n + op.queueMessages, 0);
}

/** One message holding the given dispatches of the shard, delivered as the Queue would, once it was delivered `attempts` times. */
async function deliverPack(shard: string, runIds: string[], attempts = 1) {
  const body: DispatchPack = { shard, dispatches: runIds.map((runId) => ({ runId, fence: 1 })) };
  const batch = createMessageBatch<QueueMessage>("edgecron-runs", [{ id: "pack", timestamp: new Date(), attempts, body }]);
  const ctx = createExecutionContext();
  await consumer.queue!(batch, env, ctx);
  return getQueueResult(batch, ctx);
}

describe("dispatches packed into queue messages", () => {
  it("a shard's fires go out ten to a message, and each runs and is recorded once", async () => {
    const count = 2 * DISPATCHES_PER_MESSAGE + 3;
    const url = receiverPath("packs");
    const { stub, runIds } = await firedTogether(Array(count).fill(url));
    await expect.poll(() => runStates(stub, runIds), { timeout: 20_000, interval: 50 }).toEqual(Array(count).fill("succeeded"));
    // 10 + 10 + 3: three messages for 23 runs, where one each made 23.
    expect(await messagesSent(stub)).toBe(3);
    const hits = await hitsOf(url);
    expect(hits.map((h) => h.headers["idempotency-key"]).sort()).toEqual([...runIds].sort());
  });

  it("one dispatch whose outcome could not be reported keeps it on the queue; its message is acked and nothing runs twice", async () => {
    // The first target answers at once; the others later, once its report has failed.
    const urls = [receiverPath("packs-fast"), receiverPath("packs-slow", "delayMs=2000"), receiverPath("packs-slow", "delayMs=2000")];
    const { name, stub, runIds } = await firedTogether(urls, { held: true });
    expect(await runStates(stub, runIds)).toEqual(["running", "running", "running"]);

    // Every try of the first report fails (3 tries): its outcome goes on the queue; the later report goes through.
    armFault("consumer.report", 3, name);
    const first = await deliverPack(name, runIds);
    expect(first.explicitAcks).toEqual(["pack"]);
    expect(first.retryMessages).toEqual([]);
    // The queue delivers the kept outcome to the consumer, which reports it.
    await expect.poll(() => runStates(stub, runIds), { timeout: 10_000 }).toEqual(["succeeded", "succeeded", "succeeded"]);
    for (const url of urls) expect(await hitsOf(url)).toHaveLength(1);
  });

  it("a message whose dispatches all ran is acked, one whose consumer died first is retried whole", async () => {
    const urls = [receiverPath("packs-a"), receiverPath("packs-b")];
    const { name, stub, runIds } = await firedTogether(urls, { held: true });

    // The consumer dies before calling any target: the invocation fails, its message unsettled, for the Queue to deliver again.
    armFault("consumer.beforeExecute", 1, name);
    await expect(deliverPack(name, runIds)).rejects.toThrow("injected fault");
    expect(await runStates(stub, runIds)).toEqual(["running", "running"]);
    for (const url of urls) expect(await hitsOf(url)).toHaveLength(0);

    const delivered = await deliverPack(name, runIds, 2);
    expect(delivered.explicitAcks).toEqual(["pack"]);
    expect(delivered.retryMessages).toEqual([]);
    expect(await runStates(stub, runIds)).toEqual(["succeeded", "succeeded"]);
  });

  it("a dispatch held for its origin's breaker is done: the others of its message run, and the message is acked", async () => {
    const urls = [receiverPath("packs-down"), receiverPath("packs-up")];
    const { name, stub, runIds } = await firedTogether(urls, { held: true });
    // The first dispatch names an origin whose breaker is open (the key is the dispatch's: its
    // target is the receiver all the same); the second names none, as for a job that opted out.
    const down = `https://down-${crypto.randomUUID()}.example`;
    await gateStub(env, "default").recordOutcomes(
      Array.from({ length: FAILURES_TO_OPEN }, (_, i) => ({ origin: down, ok: false, caller: `job-${i}` })),
    );
    const body: DispatchPack = {
      shard: name,
      dispatches: [
        { runId: runIds[0]!, fence: 1, tenantId: "default", origin: down },
        { runId: runIds[1]!, fence: 1 },
      ],
    };
    const batch = createMessageBatch<QueueMessage>("edgecron-runs", [{ id: "pack", timestamp: new Date(), attempts: 1, body }]);
    const ctx = createExecutionContext();
    await consumer.queue!(batch, env, ctx);
    const result = await getQueueResult(batch, ctx);
    expect(result.explicitAcks).toEqual(["pack"]);
    expect(result.retryMessages).toEqual([]);
    expect(await runStates(stub, runIds)).toEqual(["waiting", "succeeded"]);
    expect(await hitsOf(urls[0]!)).toHaveLength(0);
    expect(await hitsOf(urls[1]!)).toHaveLength(1);
  });

  it("a dead-lettered message has each of its current dispatches sent again", async () => {
    const urls = [receiverPath("packs-dl-a"), receiverPath("packs-dl-b")];
    const { name, stub, runIds } = await firedTogether(urls, { held: true });
    const body: DispatchPack = {
      shard: name,
      dispatches: [...runIds.map((runId) => ({ runId, fence: 1 })), { runId: runIds[0]!, fence: 7 }],
    };
    const batch = createMessageBatch<QueueMessage>("edgecron-runs-dlq", [{ id: "dead", timestamp: new Date(), attempts: 6, body }]);
    const ctx = createExecutionContext();
    await consumer.queue!(batch, env, ctx);
    expect((await getQueueResult(batch, ctx)).explicitAcks).toEqual(["dead"]);
    // Both runs stay running, each sent again once; the dispatch of a fence it never had is stale.
    const redispatches = await runInDurableObject(stub, (_s: Shard, state) =>
      runIds.map((id) => state.storage.sql.exec("SELECT state, redispatches FROM runs WHERE id = ?", id).one()),
    );
    expect(redispatches).toEqual([
      { state: "running", redispatches: 1 },
      { state: "running", redispatches: 1 },
    ]);
  });
});

describe("deliveries: a message settles once all its dispatches have", () => {
  it("is acked when every dispatch is done, retried when any must come again, left alone while one is unsettled", async () => {
    await fc.assert(
      fc.asyncProperty(
        // Per message: its dispatches' fates (done, again, or never settled), in a settling order.
        fc.array(fc.array(fc.constantFrom("done", "again", "unsettled"), { minLength: 1, maxLength: 10 }), { minLength: 1, maxLength: 8 }),
        fc.integer({ min: 0, max: 1_000 }),
        async (fates, seed) => {
          const batch = createMessageBatch<QueueMessage>(
            "edgecron-runs",
            fates.map((f, m) => ({
              id: `m${m}`,
              timestamp: new Date(),
              attempts: 1,
              body: { shard: "shard-1", dispatches: f.map((_, d) => ({ runId: `run_${m}_${d}`, fence: 1 })) },
            })),
          );
          const deliveries = unpack(batch.messages as Message<DispatchPack>[]);
          const fateOf = new Map<string, string>(fates.flatMap((f, m) => f.map((fate, d) => [`run_${m}_${d}`, fate] as const)));
          // Settle in a shuffled order, each delivery twice (the second must change nothing).
          const order = [...deliveries].sort((a, b) => hash(a.dispatch.runId, seed) - hash(b.dispatch.runId, seed));
          for (const delivery of [...order, ...order]) {
            const fate = fateOf.get(delivery.dispatch.runId);
            if (fate === "done") delivery.done();
            else if (fate === "again") delivery.again();
          }
          const result = await getQueueResult(batch, createExecutionContext());
          const expectAcked = fates.flatMap((f, m) => (f.every((x) => x === "done") ? [`m${m}`] : []));
          const expectRetried = fates.flatMap((f, m) => (!f.includes("unsettled") && f.includes("again") ? [`m${m}`] : []));
          expect(result.explicitAcks.sort()).toEqual(expectAcked.sort());
          expect(result.retryMessages.map((r) => r.msgId).sort()).toEqual(expectRetried.sort());
        },
      ),
      { numRuns: 100 },
    );
  });
});

/** A deterministic shuffle key. */
function hash(text: string, seed: number): number {
  let h = seed >>> 0;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16_777_619) >>> 0;
  return h;
}
