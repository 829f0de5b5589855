import {
  createExecutionContext,
  createMessageBatch,
  env,
  evictDurableObject,
  runDurableObjectAlarm,
  runInDurableObject,
} from "cloudflare:test";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { REPORT_TRIES } from "../../src/consumer/reporter";
import { armFault, disarmFault, disarmFaults, type FaultPoint, faultCounts } from "../../src/faults";
import worker from "../../src/index";
import type { Job } from "../../src/model/job";
import type { DispatchMessage } from "../../src/protocol/queue-messages";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, FAR_CRON, fireNow, hitsOf, makeRunDue, receiverPath, shardOf, sweepFully } from "./helpers";

/**
 * The fault-injection suite: each scenario makes a named step fail (or the platform misbehave)
 * and then checks the invariants of docs/architecture.md on everything the scenario touched:
 * every due run reaches a final state, its outcome is recorded exactly once, every request
 * that reached the target carried the run's Idempotency-Key, and nothing ran for a job after
 * its pause or delete was answered. Each scenario runs REPEAT times with fresh jobs.
 */
const REPEAT = 3;
const handler = worker as ExportedHandler<Env, DispatchMessage>;
/** platformFaults: duplicated or reordered deliveries, repeated reports, object restarts (no failpoint needed). */
const report = { scenarios: 0, repetitions: 0, platformFaults: 0, runsChecked: 0, lost: 0, duplicated: 0 };

afterEach(() => disarmFaults());
afterAll(() => {
  const injected = [...faultCounts.values()].reduce((a, b) => a + b, 0);
  console.log(`fault suite: ${JSON.stringify({ ...report, faultsInjected: injected, byPoint: Object.fromEntries(faultCounts) })}`);
});

// ---- tools ----

/** Everything a shard knows about a job's runs, read from its storage (no D1, no API). */
async function shardRuns(job: Job) {
  return runInDurableObject(shardOf(job), (_s: Shard, state) => ({
    runs: state.storage.sql.exec("SELECT id, state, scheduled_at, a_started_at FROM runs WHERE job_id = ?", job.id).toArray() as Array<{
      id: string;
      state: string;
      scheduled_at: number;
      a_started_at: number | null;
    }>,
    attempts: state.storage.sql
      .exec("SELECT a.run_id, a.outcome FROM attempt_log a JOIN runs r ON r.id = a.run_id WHERE r.job_id = ?", job.id)
      .toArray() as Array<{ run_id: string; outcome: string }>,
  }));
}

/** Makes the job's next fire due and runs the alarm; the alarm may throw (an injected fault). */
async function fireDue(job: Job): Promise<void> {
  await fireNow(job).catch((err: Error) => expect(err.message).toContain("injected fault"));
}

async function runAlarm(job: Job): Promise<void> {
  await runDurableObjectAlarm(shardOf(job)).catch((err: Error) => expect(err.message).toContain("injected fault"));
}

async function sweep(): Promise<void> {
  await sweepFully();
}

/**
 * Drives a job's runs to final states: retry waits are made due at once, and so are the leases
 * of attempts dispatched over QUEUE_ALLOWANCE_MS ago (a younger one may be on its way through
 * the queue, its message redelivered after a consumer died: ending its lease would send it again).
 * Waits for `expectedRuns` to exist first: an alarm the runtime runs by itself may still be
 * committing them, and no runs at all is not settled.
 */
/** Longer than the queue's first redelivery delay (2 s) with room for a loaded machine. */
const QUEUE_ALLOWANCE_MS = 8_000;

async function settle(job: Job, timeout = 20_000, expectedRuns = 0): Promise<void> {
  const deadline = Date.now() + timeout;
  for (;;) {
    const { runs } = await shardRuns(job);
    const open = runs.filter((r) => !["succeeded", "failed", "dead", "cancelled"].includes(r.state));
    if (open.length === 0 && runs.length >= expectedRuns) return;
    if (Date.now() > deadline) throw new Error(`runs still open: ${JSON.stringify(open)}`);
    const stuck = (r: (typeof open)[number]) => r.state === "running" && (r.a_started_at ?? 0) < Date.now() - QUEUE_ALLOWANCE_MS;
    for (const r of open) if (r.state === "retry_wait" || stuck(r)) await makeRunDue(job, r.id).catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
}

/**
 * The invariants, for one job whose target always answers 200: `expectedRuns` fires happened,
 * each ended succeeded with exactly one succeeded attempt, and the target saw only those runs,
 * each request carrying its run's Idempotency-Key.
 */
async function checkInvariants(job: Job, url: string, expectedRuns: number): Promise<void> {
  await settle(job, undefined, expectedRuns);
  const { runs, attempts } = await shardRuns(job);
  const hits = await hitsOf(url);
  report.runsChecked += runs.length;
  report.lost += Math.max(0, expectedRuns - runs.filter((r) => r.state === "succeeded").length);
  const successes = new Map<string, number>();
  for (const a of attempts) if (a.outcome === "succeeded") successes.set(a.run_id, (successes.get(a.run_id) ?? 0) + 1);
  report.duplicated += [...successes.values()].filter((n) => n > 1).length;

  expect(runs).toHaveLength(expectedRuns);
  expect(new Set(runs.map((r) => r.scheduled_at)).size).toBe(runs.length); // one run per fire
  for (const r of runs) {
    expect(r.state).toBe("succeeded");
    expect(successes.get(r.id)).toBe(1);
  }
  const ids = new Set(runs.map((r) => r.id));
  for (const h of hits) {
    expect(ids.has(h.headers["idempotency-key"]!)).toBe(true);
    expect(h.headers["x-edgecron-run-id"]).toBe(h.headers["idempotency-key"]);
  }
  for (const id of ids) expect(hits.some((h) => h.headers["idempotency-key"] === id)).toBe(true);
}

async function newJob(name: string, extra: Record<string, unknown> = {}) {
  const url = receiverPath(name);
  const job = await createJob({ schedule: FAR_CRON, target: { url }, timeoutMs: 1_000, ...extra });
  return { job, url };
}

function scenario(name: string, body: (rep: number) => Promise<void>) {
  it(name, async () => {
    report.scenarios++;
    for (let rep = 0; rep < REPEAT; rep++) {
      report.repetitions++;
      await body(rep);
      disarmFaults();
    }
  });
}

const injected = (point: FaultPoint) => faultCounts.get(point) ?? 0;

// ---- the scenarios ----

describe("fault injection", () => {
  scenario("crash after the D1 write, before the shard call: the sweep delivers the job", async (rep) => {
    const url = receiverPath(`f-api-${rep}`);
    const before = injected("api.afterCatalogWrite");
    armFault("api.afterCatalogWrite");
    const res = await api("/v1/jobs", {
      method: "POST",
      json: { schedule: { at: new Date(Date.now() - 1).toISOString() }, target: { url } },
    });
    expect(res.status).toBe(500); // the request died
    expect(injected("api.afterCatalogWrite")).toBe(before + 1);
    // The newest job (ids sort by time): its URL is sealed, so it cannot be looked up by it.
    const row = await env.DB.prepare("SELECT id, shard FROM jobs WHERE created_at >= ? ORDER BY id DESC LIMIT 1")
      .bind(Date.now() - 10_000)
      .first<{ id: string; shard: string }>();
    expect(row).not.toBeNull();
    const job = { id: row!.id, shard: row!.shard } as Job;
    expect((await shardRuns(job)).runs).toHaveLength(0);

    await sweep();
    await checkInvariants(job, url, 1);
  });

  scenario("the alarm handler throws before doing anything: the retried alarm fires once", async (rep) => {
    const { job, url } = await newJob(`f-alarm-${rep}`);
    // Every alarm start throws while armed: the runtime may run the past-due alarm by itself as
    // well, and a fault for one start would let that second run fire the job.
    armFault("shard.alarmStart", Infinity, job.shard);
    await fireDue(job);
    expect((await shardRuns(job)).runs).toHaveLength(0);
    disarmFault("shard.alarmStart", job.shard);
    await runInDurableObject(shardOf(job), (_s: Shard, state) => state.storage.setAlarm(Date.now() - 1)); // the runtime's retry
    await runAlarm(job);
    await checkInvariants(job, url, 1);
  });

  scenario("crash in the alarm after the commit, before the queue send: the dispatch is sent later", async (rep) => {
    const { job, url } = await newJob(`f-commit-${rep}`);
    armFault("shard.afterCommit", 1, job.shard);
    await fireDue(job);
    // Nothing was sent. The run is either committed with its dispatch kept unsent, or (if the
    // platform rolled the throwing handler's writes back) not there yet: both are safe.
    const { runs } = await shardRuns(job);
    expect(runs.map((r) => r.state)).toEqual(runs.length ? ["running"] : []); // dispatched: its attempt began, its send did not happen
    expect(await hitsOf(url)).toHaveLength(0);
    // Recovery either by the runtime's alarm retry (rep 0) or, if that was lost too, by the sweep.
    if (rep === 0) {
      await runInDurableObject(shardOf(job), (_s: Shard, state) => state.storage.setAlarm(Date.now() - 1));
      await runAlarm(job);
    } else {
      await sweep();
    }
    await checkInvariants(job, url, 1);
  });

  scenario(
    "the queue takes a send whose answer is lost: sent again, the one attempt is not used up, the run succeeds once",
    async (rep) => {
      // With one attempt: a lost answer that spent the attempt without calling the target would end the run dead.
      const { job, url } = await newJob(`f-answer-${rep}`, { retry: { maxAttempts: 1 } });
      const before = injected("shard.queueSendAnswer");
      armFault("shard.queueSendAnswer", 1, job.shard);
      await fireDue(job);
      await vi.waitFor(() => expect(injected("shard.queueSendAnswer")).toBe(before + 1), { timeout: 5_000, interval: 20 });
      // The shard kept the dispatch it thinks refused, and sends it again: the queue holds two copies of the one attempt.
      await runInDurableObject(shardOf(job), (_s: Shard, state) => state.storage.setAlarm(Date.now() - 1));
      await runAlarm(job);
      await checkInvariants(job, url, 1);
      const { attempts } = await shardRuns(job);
      expect(attempts.map((a) => a.outcome)).toEqual(["succeeded"]);
      // Each copy may call the target, both as attempt 1 under the run's key.
      const hits = await hitsOf(url);
      expect(hits.length).toBeGreaterThanOrEqual(1);
      expect(hits.length).toBeLessThanOrEqual(2);
      expect(new Set(hits.map((h) => h.headers["x-edgecron-attempt"]))).toEqual(new Set(["1"]));
    },
  );

  scenario("the queue send throws: the dispatch is kept and a later alarm sends it", async (rep) => {
    const { job, url } = await newJob(`f-send-${rep}`);
    // Every send fails while armed: the runtime may run the past-due alarm by itself as well,
    // and a fault armed for one send would let that second run send the row.
    armFault("shard.queueSend", Infinity, job.shard);
    await fireDue(job);
    // The alarm that made the run may be the runtime's own, still committing: wait for its dispatch.
    await vi.waitFor(
      async () => {
        const metrics = await runInDurableObject(shardOf(job), (shard: Shard) => shard.metrics(60_000));
        expect(metrics.outbox).toBe(1);
      },
      { timeout: 5_000, interval: 20 },
    );
    // The shard armed its alarm for a retry of the send; the Queue takes sends again, and the
    // alarm is run now instead of waiting.
    const alarm = await runInDurableObject(shardOf(job), (_s: Shard, state) => state.storage.getAlarm());
    expect(alarm).not.toBeNull();
    disarmFault("shard.queueSend", job.shard);
    await runInDurableObject(shardOf(job), (_s: Shard, state) => state.storage.setAlarm(Date.now() - 1));
    await runAlarm(job);
    await checkInvariants(job, url, 1);
  });

  scenario("the consumer dies after the target answered, before reporting: the queue delivers it again, one outcome", async (rep) => {
    const { job, url } = await newJob(`f-report-${rep}`);
    armFault("consumer.beforeReport", 1, job.shard);
    await fireDue(job);
    // The real queue delivers; the consumer calls the target, then dies: the message is not acked.
    await vi.waitFor(async () => expect((await hitsOf(url)).length).toBeGreaterThanOrEqual(1), { timeout: 10_000 });
    await checkInvariants(job, url, 1);
    // Delivered again, the same attempt calls its target again, with the same Idempotency-Key; one outcome is recorded.
    const { attempts } = await shardRuns(job);
    expect(attempts.map((a) => a.outcome)).toEqual(["succeeded"]);
    const hits = await hitsOf(url);
    expect(hits.map((h) => h.headers["x-edgecron-attempt"])).toEqual(["1", "1"]);
    expect(new Set(hits.map((h) => h.headers["idempotency-key"])).size).toBe(1);
  });

  scenario("every report of an outcome fails, the consumer lives: the outcome is kept on the queue and recorded", async (rep) => {
    const { job, url } = await newJob(`f-unreported-${rep}`);
    armFault("consumer.report", REPORT_TRIES, job.shard);
    const before = injected("consumer.report");
    await fireDue(job);
    await expect.poll(async () => (await hitsOf(url)).length, { timeout: 10_000 }).toBe(1);
    await expect.poll(() => injected("consumer.report"), { timeout: 10_000 }).toBe(before + REPORT_TRIES);
    // The kept outcome reaches the shard by the queue: the one attempt succeeded, nothing timed out.
    await checkInvariants(job, url, 1);
    const { attempts } = await shardRuns(job);
    expect(attempts.map((a) => a.outcome)).toEqual(["succeeded"]);
  });

  scenario("the consumer dies before calling any target: the queue redelivers", async (rep) => {
    const { job, url } = await newJob(`f-claim-${rep}`);
    armFault("consumer.beforeExecute", 1, job.shard);
    await fireDue(job);
    await checkInvariants(job, url, 1);
    expect(await hitsOf(url)).toHaveLength(1);
  });

  scenario("outcome reported twice, messages duplicated and out of order: recorded once", async (rep) => {
    const { job, url } = await newJob(`f-dup-${rep}`);
    await fireDue(job);
    const stub = shardOf(job);
    // The runtime may be running the past-due alarm itself: its run may not be committed yet.
    await expect.poll(async () => (await shardRuns(job)).runs.length).toBe(1);
    const [run] = (await shardRuns(job)).runs;
    // The real delivery of fence 1 may race us; end its lease regardless: sent again under the same fence.
    await makeRunDue(job, run!.id);
    // Deliver a fence the run never had twice, then fence 1, resent, after it.
    const message = (fence: number, id: string) => ({
      id,
      timestamp: new Date(),
      attempts: 1,
      body: { shard: job.shard, runId: run!.id, fence },
    });
    const batch = createMessageBatch<DispatchMessage>("edgecron-runs", [message(2, "a"), message(2, "b"), message(1, "c")]);
    await handler.queue!(batch, env, createExecutionContext());
    report.platformFaults += 5; // two duplicates, one reordering, two repeated reports
    // No consumer died here, so no lease may be cut short (settle would): the real delivery of
    // fence 1 may still be between its target's answer and its report.
    await expect.poll(async () => (await shardRuns(job)).runs.map((r) => r.state), { timeout: 10_000 }).toEqual(["succeeded"]);
    // Report the recorded outcome again, for every fence: all stale.
    expect(await stub.report([1, 2].map((fence) => ({ runId: run!.id, fence, ok: true, status: 200, error: null })))).toEqual([
      "stale",
      "stale",
    ]);
    await checkInvariants(job, url, 1);
    // At least once: each copy of fence 1 delivered before the outcome was recorded may have called
    // the target (the real one, the resent one, the hand-made one), each as attempt 1 of the one run.
    const hits = await hitsOf(url);
    expect(hits.length).toBeGreaterThanOrEqual(1);
    expect(hits.length).toBeLessThanOrEqual(3);
    expect(new Set(hits.map((h) => `${h.headers["idempotency-key"]} ${h.headers["x-edgecron-attempt"]}`))).toEqual(
      new Set([`${run!.id} 1`]),
    );
  });

  scenario("the shard object restarts mid-batch (storage kept, memory lost)", async (rep) => {
    const { job, url } = await newJob(`f-evict-${rep}`);
    const stub = shardOf(job);
    // A dispatched attempt whose shard restarts before the dispatch went out.
    armFault("shard.afterCommit", 1, job.shard);
    await fireDue(job);
    await evictDurableObject(stub);
    report.platformFaults++;
    // The dispatch was in memory: the run's lease ending sends it again (made to end here).
    for (const run of (await shardRuns(job)).runs) await makeRunDue(job, run.id);
    await sweep();
    await checkInvariants(job, url, 1);
  });

  scenario("a shard evicted while a sent dispatch waits in the queue does not send it again", async (rep) => {
    const { job } = await newJob(`f-idle-${rep}`);
    const stub = shardOf(job);
    // A run dispatched earlier, its dispatch still in the queue: written straight in, so no
    // consumer carries it out meanwhile.
    const runId = `run_${job.id.slice(4)}_idle${rep}`;
    await runInDurableObject(stub, (_s: Shard, state) => {
      state.storage.sql.exec(
        `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, created_at, watched, lease_until, started_at,
           a_number, a_fence, a_started_at, a_outcome, a_token)
         VALUES (?1, ?2, 1, 'manual', ?3, 'running', 1, 1, ?3, 0, ?4, ?3, 1, 1, ?3, 'running', 'tok')`,
        runId,
        job.id,
        Date.now(),
        Date.now() + 60_000,
      );
    });
    const sent = async () => (await stub.metrics(3_600_000)).cost.byOperation.settle?.queueMessages ?? 0;
    const before = await sent();
    await evictDurableObject(stub); // idle: the runtime may evict it, its memory with it
    report.platformFaults++;
    await stub.admitWaiting(); // a change and a settle on the new instance
    expect(await sent()).toBe(before);
    expect(await stub.getRun(runId)).toMatchObject({ state: "running" });
  });

  scenario("D1 is down: the API answers 503 with Retry-After, shards keep firing and recording", async (rep) => {
    const { job, url } = await newJob(`f-d1-${rep}`);
    armFault("catalog.unavailable", Infinity);
    const res = await api("/v1/jobs", { method: "POST", json: { schedule: FAR_CRON, target: { url } } });
    expect(res.status).toBe(503);
    expect(res.headers.get("Retry-After")).toBe("5");
    expect(await res.json()).toMatchObject({ error: { code: "catalog_unavailable" } });
    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(503);
    // A run is found through its job in D1: unavailable, not "no such run".
    expect((await api(`/v1/runs/run_${job.id.slice(4)}_abc`)).status).toBe(503);
    await fireDue(job);
    await settle(job, undefined, 1);
    expect((await shardRuns(job)).runs.map((r) => r.state)).toEqual(["succeeded"]);
    disarmFaults();
    await checkInvariants(job, url, 1);
  });

  scenario("nothing runs after a pause or delete is answered, even with a send pending", async (rep) => {
    const { job, url } = await newJob(`f-stop-${rep}`);
    // Every send fails until the pause or delete is answered: a later flush (the alarm's next
    // chunk, or the runtime running the past-due alarm itself) would otherwise send it first.
    armFault("shard.queueSend", Infinity, job.shard);
    await fireDue(job); // a run is committed, its send failed
    const action = rep % 2 === 0 ? api(`/v1/jobs/${job.id}`, { method: "DELETE" }) : api(`/v1/jobs/${job.id}/pause`, { method: "POST" });
    expect((await action).status).toBe(200);
    const answeredAt = Date.now();
    disarmFault("shard.queueSend", job.shard); // the pending send goes out now, for a run that has ended
    await runInDurableObject(shardOf(job), (_s: Shard, state) => state.storage.setAlarm(Date.now() - 1));
    await runAlarm(job);
    await new Promise((r) => setTimeout(r, 1_500)); // a queue batch window
    expect((await hitsOf(url)).filter((h) => h.receivedAt >= answeredAt)).toHaveLength(0);
    expect((await shardRuns(job)).runs.map((r) => r.state)).toEqual(["cancelled"]);
  });
});
