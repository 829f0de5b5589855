import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, onTestFinished, vi } from "vitest";
import { armFault, disarmFaults } from "../../src/faults";
import { newJobId, scheduledRunId } from "../../src/model/ids";
import type { JobSpec } from "../../src/model/job";
import type { DispatchPack } from "../../src/protocol/queue-messages";
import type { JobDefinition } from "../../src/protocol/stored-rows";
import { dispatchQueue } from "../../src/queues";
import { DISPATCHES_PER_MESSAGE, QUEUE_BATCH_MESSAGES } from "../../src/shard/dispatch-packs";
import { FIRE_CHUNK } from "../../src/shard/firing";
import { TICK_BATCH } from "../../src/shard/ledger";
import type { Shard } from "../../src/shard/shard";
import { createJob, FAR_CRON, receiverPath, shardOf } from "./helpers";

/**
 * Pipelined firing (docs/architecture.md, invariant 6): the alarm commits due fires FIRE_CHUNK
 * jobs at a time and starts sending each chunk's dispatches before it writes the next. What is
 * checked is the order of events, never a duration: the Queue's `sendBatch` is replaced by a
 * recorder that notes how many runs the shard had committed when it was called, and at the
 * next turn of the event loop, when a real send's request would go out. The
 * dispatches are not handed to the real Queue (a few thousand deliveries would only slow the
 * suite), and each test deletes its jobs when it ends, passed or not, which cancels their
 * queued runs, so no later resend reaches the real Queue either. Each test has a shard of its
 * own: alarms are not reset between tests.
 */

afterEach(() => {
  disarmFaults();
  vi.restoreAllMocks();
});

interface Send {
  runIds: string[];
  /** Dispatches in each of its messages. */
  packs: number[];
  /** Runs the shard had committed when this `sendBatch` was called. */
  runsAtCall: number;
  /** Runs it had committed at the next turn of the event loop, when a real send's request goes out. */
  runsWhenOut: number | null;
}

/** A stored job spec as the API writes it (its target sealed), the schedule FAR_CRON's. */
async function storedSpec(): Promise<JobSpec> {
  const template = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("pipeline") } });
  return runInDurableObject(shardOf(template), (_s: Shard, state) =>
    JSON.parse(state.storage.sql.exec("SELECT spec FROM jobs WHERE id = ?", template.id).one().spec as string),
  );
}

/**
 * A shard of its own holding `count` jobs, all due at one instant (`due`, just past), and its
 * Queue replaced by a recorder of the sends. The alarm is left where the jobs' own next fire
 * put it (next January), so nothing runs until the test runs the alarm.
 */
async function burst(count: number) {
  const name = `pipeline-${crypto.randomUUID()}`;
  const stub = env.SHARD.get(env.SHARD.idFromName(name));
  const spec = await storedSpec();
  const now = Date.now();
  const jobs: JobDefinition[] = Array.from({ length: count }, () => ({
    id: newJobId(now),
    tenantId: "default",
    version: 1,
    spec,
    paused: false,
    deleted: false,
    createdAt: now,
  }));
  await stub.applyJobs(jobs);
  // Deleting the jobs cancels their queued runs: nothing is sent for them later.
  // Thousands of deletes in one call: more than the default 10 s on a loaded machine.
  onTestFinished(async () => {
    await stub.applyJobs(jobs.map((j) => ({ ...j, version: 2, deleted: true })));
  }, 60_000);
  const sends: Send[] = [];
  const due = Date.now() - 1;
  await runInDurableObject(stub, (shard: Shard, state) => {
    const queue = dispatchQueue((shard as unknown as { env: Env }).env, name); // the queue this shard sends to
    const runsCommitted = () => state.storage.sql.exec("SELECT COUNT(*) AS n FROM runs").one().n as number;
    vi.spyOn(queue, "sendBatch").mockImplementation((messages) => {
      const packs = [...messages].map((m) => (m.body as DispatchPack).dispatches);
      const send: Send = {
        runIds: packs.flat().map((d) => d.runId),
        packs: packs.map((p) => p.length),
        runsAtCall: runsCommitted(),
        runsWhenOut: null,
      };
      sends.push(send);
      return new Promise((resolve) =>
        setTimeout(() => {
          send.runsWhenOut = runsCommitted();
          resolve({ metadata: { metrics: { backlogCount: 0, backlogBytes: 0 } } });
        }, 0),
      );
    });
    state.storage.sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1", due);
  });
  const runIds = jobs.map((j) => scheduledRunId(j.id, due));
  return {
    stub,
    jobs,
    runIds,
    sends,
    /** The alarm handler, run as the runtime runs it (it may throw). */
    alarm: () => runInDurableObject(stub, (shard: Shard) => shard.alarm()),
    /**
     * The alarm handler, then at once (before the runtime can start the alarm it re-armed) the
     * shard's run count and the ids sent so far: what that one alarm did.
     */
    alarmAlone: () =>
      runInDurableObject(stub, async (shard: Shard, state) => {
        await shard.alarm();
        return { runs: state.storage.sql.exec("SELECT COUNT(*) AS n FROM runs").one().n as number, sent: sentIds(sends) };
      }),
    /** The shard's runs. */
    runs: () =>
      runInDurableObject(stub, (_s: Shard, state) =>
        state.storage.sql
          .exec("SELECT id, job_id, scheduled_at FROM runs")
          .toArray()
          .map((r) => ({
            id: r.id as string,
            jobId: r.job_id as string,
            scheduledAt: r.scheduled_at as number,
          })),
      ),
    due,
  };
}

const sentIds = (sends: Send[]) => sends.flatMap((s) => s.runIds);

describe("pipelined firing", () => {
  it("sends a burst's first dispatches before its later chunks are written; every fire makes one run, sent once", {
    timeout: 120_000,
  }, async () => {
    const count = TICK_BATCH + 2 * FIRE_CHUNK + 37; // a second alarm for what the first one's cap leaves
    const b = await burst(count);

    const first = await b.alarmAlone();
    // The first sendBatch was called once the first chunk was committed, and its request had
    // its turn to go out before the second chunk was written.
    expect(b.sends.length).toBeGreaterThan(0);
    expect(b.sends[0]).toMatchObject({ runsAtCall: FIRE_CHUNK, runsWhenOut: FIRE_CHUNK });
    expect(b.sends[0]!.runIds).toHaveLength(FIRE_CHUNK);
    // Ten dispatches to a message, a hundred messages to a send at most: the Queue's limit.
    expect(b.sends[0]!.packs).toEqual(Array(FIRE_CHUNK / DISPATCHES_PER_MESSAGE).fill(DISPATCHES_PER_MESSAGE));
    for (const send of b.sends) expect(send.packs.length).toBeLessThanOrEqual(QUEUE_BATCH_MESSAGES);
    expect(first.runs).toBe(TICK_BATCH); // the cap per alarm holds
    // Sends went out between the later chunks of the same alarm too.
    expect(b.sends.filter((s) => s.runsWhenOut! > FIRE_CHUNK && s.runsWhenOut! < TICK_BATCH).length).toBeGreaterThan(0);
    // Every dispatch of the first alarm was sent before it ended.
    expect(new Set(first.sent).size).toBe(TICK_BATCH);

    // The alarm re-armed at once for the rest; the runtime may already be running it itself.
    await vi.waitFor(
      async () => {
        await runDurableObjectAlarm(b.stub);
        expect(sentIds(b.sends)).toHaveLength(count);
      },
      { timeout: 20_000, interval: 50 },
    );
    const runs = await b.runs();
    expect(runs.map((r) => r.id).sort()).toEqual([...b.runIds].sort());
    expect(new Set(runs.map((r) => r.jobId)).size).toBe(count);
    expect(runs.every((r) => r.scheduledAt === b.due)).toBe(true);
    expect(sentIds(b.sends).sort()).toEqual([...b.runIds].sort()); // each dispatch sent once

    // Every chunk's statements were charged to the alarm, not to `settle` (which wrote no statement
    // here: at most the alarms it set, each billed as a row).
    const { byOperation, byTable } = (await b.stub.metrics(3_600_000)).cost;
    expect(byOperation.alarm!.rowsWritten).toBeGreaterThanOrEqual(2 * count);
    expect(byOperation.settle?.rowsWritten ?? 0).toBeLessThanOrEqual(byTable["(setAlarm)"] ?? 0);
  });

  it("a throw between chunks keeps what was committed, and sent; the next alarm fires the rest once", { timeout: 120_000 }, async () => {
    const count = 3 * FIRE_CHUNK + 50;
    const b = await burst(count);
    const name = await runInDurableObject(b.stub, (_s: Shard, state) => state.id.name!);

    armFault("shard.betweenChunks", 1, name);
    await expect(b.alarm()).rejects.toThrow("injected fault at shard.betweenChunks");
    // The first chunk stands, and its dispatches went out before the alarm failed.
    const committed = await b.runs();
    expect(committed).toHaveLength(FIRE_CHUNK);
    expect(sentIds(b.sends).sort()).toEqual(committed.map((r) => r.id).sort());
    // The jobs not fired are still due (a fired one's row is left as it was: its run carries its next fire).
    const stillDue = await runInDurableObject(
      b.stub,
      (_s: Shard, state) =>
        state.storage.sql
          .exec(
            "SELECT COUNT(*) AS n FROM jobs WHERE next_due_at <= ? AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id)",
            b.due,
          )
          .one().n as number,
    );
    expect(stillDue).toBe(count - FIRE_CHUNK);

    await b.alarm(); // the runtime's retry
    const runs = await b.runs();
    expect(runs.map((r) => r.id).sort()).toEqual([...b.runIds].sort());
    expect(sentIds(b.sends).sort()).toEqual([...b.runIds].sort()); // nothing sent twice
  });
});
