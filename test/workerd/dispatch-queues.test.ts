import { createExecutionContext, createMessageBatch, env, getQueueResult, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { config, Misconfigured } from "../../src/config";
import { armFault, disarmFaults } from "../../src/faults";
import worker from "../../src/index";
import { dispatchQueueIndex } from "../../src/model/dispatch-queue";
import type { Job } from "../../src/model/job";
import type { DispatchMessage, DispatchPack } from "../../src/protocol/queue-messages";
import { dispatchQueue } from "../../src/queues";
import type { Shard } from "../../src/shard/shard";
import { createJob, FAR_CRON, fireNow, getRun, hitsOf, listRuns, makeRunDue, receiverPath, shardOf, waitForRun } from "./helpers";

/**
 * The dispatch queues of wrangler.toml (DISPATCH_QUEUES = "RUNS,RUNS_1"), by the queue names
 * its consumers are declared with: the handler is told names, the shards know bindings.
 */
const QUEUES = ["edgecron-runs", "edgecron-runs-1"];
const DEAD_LETTER_QUEUES = ["edgecron-runs-dlq", "edgecron-runs-1-dlq"];

const consumer = worker as ExportedHandler<Env, DispatchMessage>;

afterEach(() => {
  disarmFaults();
  vi.restoreAllMocks();
});

/** New jobs, `perQueue` on shards of each dispatch queue (a job's shard is a hash of its random id). */
async function jobsOnEachQueue(perQueue: number, target: () => string): Promise<Job[][]> {
  const byQueue: Job[][] = QUEUES.map(() => []);
  for (let tries = 0; byQueue.some((jobs) => jobs.length < perQueue); tries++) {
    if (tries === 60) throw new Error("no job landed on a shard of some queue");
    const job = await createJob({ schedule: FAR_CRON, target: { url: target() } });
    const jobs = byQueue[dispatchQueueIndex(job.shard, QUEUES.length)]!;
    if (jobs.length < perQueue) jobs.push(job);
  }
  return byQueue;
}

async function redispatchesOf(job: Job, runId: string): Promise<number> {
  return runInDurableObject(
    shardOf(job),
    (_s: Shard, st) => st.storage.sql.exec("SELECT redispatches FROM runs WHERE id = ?", runId).one().redispatches as number,
  );
}

describe("several dispatch queues", () => {
  it("the test Worker has the two queues of wrangler.toml, a shard's queue is its number modulo two", () => {
    expect(config(env).dispatchQueues).toEqual(["RUNS", "RUNS_1"]);
    expect(dispatchQueue(env, "shard-10")).toBe(env.RUNS);
    expect(dispatchQueue(env, "shard-11")).toBe(env.RUNS_1);
  });

  it("runs of shards on different queues all complete, each delivered from its shard's queue", async () => {
    // The Worker's handler is observed, not replaced: every delivery still runs it.
    const deliveries = vi.spyOn(consumer, "queue");
    const byQueue = await jobsOnEachQueue(2, () => receiverPath("queues"));
    const jobs = byQueue.flat();
    await Promise.all(jobs.map((job) => fireNow(job)));
    const runs = await Promise.all(jobs.map(async (job) => (await listRuns(job.id))[0]!));
    for (const run of runs) await waitForRun(run.id, ["succeeded"]);
    for (const job of jobs) expect(await hitsOf(job.target!.url)).toHaveLength(1);

    // Which queue delivered each run: always its shard's.
    const deliveredFrom = new Map<string, Set<string>>();
    for (const [batch] of deliveries.mock.calls) {
      for (const m of batch.messages) {
        // A shard sends its dispatches several to a message (src/shard/dispatch-packs.ts).
        for (const { runId } of (m.body as unknown as DispatchPack).dispatches) {
          deliveredFrom.set(runId, (deliveredFrom.get(runId) ?? new Set()).add(batch.queue));
        }
      }
    }
    byQueue.forEach((queueJobs, i) => {
      for (const job of queueJobs) {
        const run = runs[jobs.indexOf(job)]!;
        expect([...(deliveredFrom.get(run.id) ?? [])], `${job.shard}'s run`).toEqual([QUEUES[i]]);
      }
    });
  });

  it.each(DEAD_LETTER_QUEUES.map((name, i) => [name, i] as const))(
    "a dispatch dead-lettered into %s leaves its attempt under way, sent again, and it later succeeds",
    async (deadLetterQueue, i) => {
      const url = receiverPath("queues-dl");
      const [job] = (await jobsOnEachQueue(1, () => url))[i]!;
      armFault("consumer.beforeExecute", Infinity, job!.shard); // no consumer carries it out: the queue would give up
      await fireNow(job!);
      const [run] = await listRuns(job!.id);
      const body: DispatchMessage = { shard: job!.shard, runId: run!.id, fence: 1 };
      const batch = createMessageBatch<DispatchMessage>(deadLetterQueue, [{ id: "d1", timestamp: new Date(), attempts: 6, body }]);
      const ctx = createExecutionContext();
      await consumer.queue!(batch, env, ctx);
      expect((await getQueueResult(batch, ctx)).explicitAcks).toEqual(["d1"]);
      expect(await getRun(run!.id)).toMatchObject({ state: "running", error: expect.stringContaining("dead-lettered") });
      // Due at once: the runtime's alarm sends it again, by itself and soon, not necessarily yet.
      await vi.waitFor(async () => expect(await redispatchesOf(job!, run!.id)).toBeGreaterThanOrEqual(1), { timeout: 10_000 });
      expect(await hitsOf(url)).toHaveLength(0);

      disarmFaults();
      await makeRunDue(job!, run!.id);
      const done = await waitForRun(run!.id, ["succeeded"]);
      expect(done.attemptLog!.map((a) => a.outcome)).toEqual(["succeeded"]);
      // The copies the queue still held (retried while no consumer could carry them out) may each
      // call the target once more: at least once, all of them the one attempt, one outcome.
      const hits = await hitsOf(url);
      expect(hits.length).toBeGreaterThanOrEqual(1);
      expect(new Set(hits.map((h) => `${h.headers["idempotency-key"]} ${h.headers["x-edgecron-attempt"]}`))).toEqual(
        new Set([`${run!.id} 1`]),
      );
    },
  );

  it("a dispatch from either queue is carried out by the consumer, whatever its shard's own queue", async () => {
    // The shards' sends are refused, so only the hand-made batches below deliver.
    armFault("shard.queueSend", Infinity);
    const url = receiverPath("queues-any");
    const byQueue = await jobsOnEachQueue(1, () => url);
    // Each job's dispatch through the other queue: as after the number of queues changed.
    for (const [i, [job]] of byQueue.entries()) {
      await fireNow(job!);
      const [run] = await listRuns(job!.id);
      const other = QUEUES[(i + 1) % QUEUES.length]!;
      const batch = createMessageBatch<DispatchMessage>(other, [
        { id: "m", timestamp: new Date(), attempts: 1, body: { shard: job!.shard, runId: run!.id, fence: 1 } },
      ]);
      const ctx = createExecutionContext();
      await consumer.queue!(batch, env, ctx);
      expect((await getQueueResult(batch, ctx)).explicitAcks).toEqual(["m"]);
      expect(await getRun(run!.id)).toMatchObject({ state: "succeeded" });
    }
    expect(await hitsOf(url)).toHaveLength(2);
  });
});

describe("dispatch queues misconfigured", () => {
  it("a consumer whose DISPATCH_QUEUES names a queue it lacks fails the batch, naming the variable, and acks nothing", async () => {
    const { RUNS_1: _, ...lacking } = env;
    const batch = createMessageBatch<DispatchMessage>("edgecron-runs", [
      { id: "m", timestamp: new Date(), attempts: 1, body: { shard: "shard-1", runId: "run_x", fence: 1 } },
    ]);
    const ctx = createExecutionContext();
    const failed = consumer.queue!(batch, lacking as unknown as Env, ctx);
    await expect(failed).rejects.toBeInstanceOf(Misconfigured);
    await expect(failed).rejects.toThrow(/^DISPATCH_QUEUES: RUNS_1 is not a queue bound to this Worker/);
    expect((await getQueueResult(batch, ctx)).explicitAcks).toEqual([]);
  });

  it("a shard's queue is not resolved from a missing binding: the send fails with the same error", () => {
    const { RUNS_1: _, ...lacking } = env;
    expect(() => dispatchQueue(lacking as unknown as Env, "shard-1")).toThrow(Misconfigured);
  });

  it("a Worker with RUNS alone and no DISPATCH_QUEUES, as deployed before there were several, has one queue", () => {
    const { RUNS_1: _, DISPATCH_QUEUES: __, ...single } = env;
    const one = single as unknown as Env;
    expect(config(one).dispatchQueues).toEqual(["RUNS"]);
    for (const shard of ["shard-0", "shard-1", "shard-4095"]) expect(dispatchQueue(one, shard)).toBe(env.RUNS);
  });
});
