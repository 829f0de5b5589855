import {
  createExecutionContext,
  createMessageBatch,
  env,
  evictDurableObject,
  runDurableObjectAlarm,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { REPORT_TRIES } from "../../src/consumer/reporter";
import { armFault, disarmFault, disarmFaults, type FaultPoint, faultCounts } from "../../src/faults";
import worker from "../../src/index";
import type { Job } from "../../src/model/job";
import type { Run } from "../../src/model/run";
import type { DispatchMessage, Outcome } from "../../src/protocol/queue-messages";
import type { Shard } from "../../src/shard/shard";
import type { Hit } from "../support/hit";
import { api, createJob, FAR_CRON, fireNow, getRun, hitsOf, makeRunDue, receiverPath, shardOf, waitForRun } from "./helpers";

/**
 * Workflow runs under faults (issue 11: "a crash between steps, with nothing lost or recorded
 * twice"). Every scenario runs one workflow job, alone in its shard, whose graph is a chain
 * a → b → c with a parallel branch a → p, joined by z:
 *
 *     a ─▶ b ─▶ c ─▶ z
 *     └──▶ p ───────┘
 *
 * Each step's target answers 200 with a JSON body of its own, which the steps below it receive.
 * A scenario makes one transition between steps fail (a fault point of src/faults.ts, or the
 * platform: an object restart, a duplicated delivery, a repeated report) and `checkFlow` then
 * checks, on the shard's own rows and on what the targets received: the run succeeded; every
 * step run is final and succeeded exactly once; the job has exactly its run and one row per
 * step, each created only after its parents ended; each target saw only its step's
 * Idempotency-Key, each attempt at most once, and the input its parents' results make.
 */

type StepId = "a" | "b" | "c" | "p" | "z";
const STEP_IDS: StepId[] = ["a", "b", "c", "p", "z"];
const PARENTS: Record<StepId, StepId[]> = { a: [], b: ["a"], c: ["b"], p: ["a"], z: ["c", "p"] };

const handler = worker as ExportedHandler<Env, DispatchMessage>;
/** platformFaults: object restarts, duplicated deliveries and repeated reports (no fault point needed). */
const report = { scenarios: 0, runsChecked: 0, stepsChecked: 0, platformFaults: 0, lost: 0, duplicated: 0 };
/** What this file injected: faultCounts is the isolate's, counted since it started. */
const countsAtStart = new Map(faultCounts);
const injected = (point: FaultPoint) => (faultCounts.get(point) ?? 0) - (countsAtStart.get(point) ?? 0);

afterEach(() => disarmFaults());
afterAll(() => {
  const byPoint = Object.fromEntries([...faultCounts.keys()].map((p) => [p, injected(p)]).filter(([, n]) => (n as number) > 0));
  const total = Object.values(byPoint).reduce((a: number, b) => a + (b as number), 0);
  console.log(`workflow fault suite: ${JSON.stringify({ ...report, faultsInjected: total, byPoint })}`);
});

// ---- tools ----

interface Flow {
  job: Job;
  urls: Record<StepId, string>;
  /** What each step's target answers, and so its result. */
  results: Record<StepId, { step: StepId; value: string }>;
}

/**
 * A workflow job of the graph above, alone in its shard (a job landing in a shard that holds
 * another live job is deleted and made again), so that a fault scoped to the shard can only
 * hit this job. `delayMs` slows a step's target down: the test acts while that step is in flight.
 */
async function newFlow(name: string, delayMs: Partial<Record<StepId, number>> = {}): Promise<Flow> {
  const results = {} as Flow["results"];
  const urls = {} as Flow["urls"];
  for (const id of STEP_IDS) {
    results[id] = { step: id, value: crypto.randomUUID() };
    const delay = delayMs[id] ? `&delayMs=${delayMs[id]}` : "";
    urls[id] = receiverPath(`wff-${name}-${id}`, `body=${encodeURIComponent(JSON.stringify(results[id]))}${delay}`);
  }
  for (let tries = 0; tries < 5; tries++) {
    const job = await createJob({
      schedule: FAR_CRON,
      timeoutMs: 2_000,
      retry: { maxAttempts: 3, backoff: { initialMs: 100, maxMs: 100 }, jitter: "none" },
      steps: STEP_IDS.map((id) => ({ id, ...(PARENTS[id].length > 0 && { after: PARENTS[id] }), target: { url: urls[id] } })),
    });
    const others = await runInDurableObject(
      shardOf(job),
      (_s: Shard, state) =>
        state.storage.sql.exec("SELECT COUNT(*) AS n FROM jobs WHERE id != ? AND deleted = 0", job.id).one().n as number,
    );
    if (others === 0) return { job, urls, results };
    expect((await api(`/v1/jobs/${job.id}`, { method: "DELETE" })).status).toBe(200);
  }
  throw new Error("no shard of its own for the job after 5 tries");
}

async function trigger(flow: Flow): Promise<string> {
  const res = await api(`/v1/jobs/${flow.job.id}/trigger`, { method: "POST" });
  expect(res.status, await res.clone().text()).toBe(202);
  return ((await res.json()) as Run).id;
}

const stepRun = (runId: string, step: StepId) => `${runId}.${step}`;

interface StepRow {
  id: string;
  state: string;
  attempt: number;
  fence: number;
  result: string | null;
  created_at: number;
  finished_at: number | null;
}

/** The shard's own rows: the job's runs, the workflow run's step runs and their attempts. */
async function shardState(flow: Flow, runId: string) {
  return runInDurableObject(shardOf(flow.job), (_s: Shard, state) => {
    const sql = state.storage.sql;
    const [from, to] = [`${runId}.`, `${runId}/`];
    return {
      jobRuns: sql.exec("SELECT id FROM runs WHERE job_id = ? ORDER BY id", flow.job.id).toArray() as Array<{ id: string }>,
      run: sql.exec("SELECT state FROM runs WHERE id = ?", runId).toArray()[0] as { state: string } | undefined,
      steps: sql
        .exec("SELECT id, state, attempt, fence, result, created_at, finished_at FROM runs WHERE id > ? AND id < ? ORDER BY id", from, to)
        .toArray() as unknown as StepRow[],
      attempts: sql
        .exec("SELECT run_id, attempt, fence, outcome FROM attempt_log WHERE run_id > ? AND run_id < ? ORDER BY run_id, fence", from, to)
        .toArray() as Array<{ run_id: string; attempt: number; fence: number; outcome: string }>,
    };
  });
}

async function stepRow(flow: Flow, runId: string, step: StepId): Promise<StepRow | undefined> {
  return (await shardState(flow, runId)).steps.find((s) => s.id === stepRun(runId, step));
}

/** Waits until the step's target has received `n` requests (the n-th is then in flight). */
async function hitsArrived(flow: Flow, step: StepId, n = 1): Promise<Hit[]> {
  return vi.waitFor(
    async () => {
      const hits = await hitsOf(flow.urls[step]);
      if (hits.length < n) throw new Error(`step ${step}: ${hits.length} requests, waiting for ${n}`);
      return hits;
    },
    { timeout: 10_000, interval: 10 },
  );
}

/**
 * Waits until `step` is in flight (its target has the request and answers after its delay) and
 * the steps in `recorded`, which could otherwise report meanwhile, have been recorded: a fault
 * armed now for the shard can only hit what follows from `step`.
 */
async function onlyInFlight(flow: Flow, runId: string, step: StepId, recorded: StepId[]): Promise<void> {
  await hitsArrived(flow, step);
  await vi.waitFor(
    async () => {
      for (const s of recorded) if ((await stepRow(flow, runId, s))?.state !== "succeeded") throw new Error(`step ${s} not recorded yet`);
    },
    { timeout: 10_000, interval: 10 },
  );
  expect((await stepRow(flow, runId, step))?.state, `step ${step} ended before the fault was armed`).toBe("running");
}

async function faultFired(point: FaultPoint, before: number, times = 1): Promise<void> {
  await expect.poll(() => injected(point), { timeout: 10_000, interval: 10 }).toBe(before + times);
}

/** Runs the shard's alarm now, as the runtime would once its time came; an injected fault may end it. */
async function runAlarmNow(flow: Flow): Promise<void> {
  const stub = shardOf(flow.job);
  await runInDurableObject(stub, (_s: Shard, state) => state.storage.setAlarm(Date.now() - 1));
  await runDurableObjectAlarm(stub).catch((err: Error) => expect(err.message).toContain("injected fault"));
}

/** Dispatch messages as the Queue delivers them, to the consumer itself, in one batch. */
async function deliver(flow: Flow, dispatches: Array<{ runId: string; fence: number }>): Promise<void> {
  const batch = createMessageBatch<DispatchMessage>(
    "edgecron-runs",
    dispatches.map((d, i) => ({
      id: `m-${crypto.randomUUID()}-${i}`,
      timestamp: new Date(),
      attempts: 1,
      body: { shard: flow.job.shard, ...d },
    })),
  );
  const ctx = createExecutionContext();
  await handler.queue!(batch, env, ctx);
  await waitOnExecutionContext(ctx);
}

/**
 * The dispatch messages a run of the graph sends when nothing is sent twice: one per release of
 * steps (a; then b and p together, which a's end released in one change, in one message; c; z).
 */
const RELEASES = 4;

/** Every dispatch message the shard has sent, its whole life (the meter's tally; no restart in between). */
async function queueMessagesSent(flow: Flow): Promise<number> {
  const metrics = await shardOf(flow.job).metrics(3_600_000);
  return Object.values(metrics.cost.byOperation).reduce((n, op) => n + op.queueMessages, 0);
}

/** Runs the shard counted as finished (the meter's tally; a workflow run counts, its steps do not). */
async function runsFinished(flow: Flow): Promise<number> {
  const metrics = await shardOf(flow.job).metrics(3_600_000);
  return Object.values(metrics.cost.byOperation).reduce((n, op) => n + op.runsFinished, 0);
}

async function outbox(flow: Flow): Promise<number> {
  return (await shardOf(flow.job).metrics(60_000)).outbox;
}

interface Expected {
  /** Requests each step's target received (default 1). */
  hits?: Partial<Record<StepId, number>>;
  /** Each step's attempts' outcomes, in order (default one succeeded attempt). */
  outcomes?: Partial<Record<StepId, string[]>>;
}

/**
 * The invariants, once the workflow run has ended: it succeeded, and so did each step, exactly
 * once, with the result its target answered; no row was made but the run and one per step, each
 * step's only after its parents ended; each target saw only its step's Idempotency-Key and
 * headers, only attempts that were recorded (one may be called twice: the queue delivers at least
 * once), and every request the input of its parents' results.
 */
async function checkFlow(flow: Flow, runId: string, expected: Expected = {}): Promise<void> {
  const run = await waitForRun(runId, ["succeeded", "failed", "cancelled", "dead"], 20_000).catch(async (err: Error) => {
    throw new Error(`${err.message}\nshard rows: ${JSON.stringify(await shardState(flow, runId))}`);
  });
  const { jobRuns, steps, attempts } = await shardState(flow, runId);
  report.runsChecked++;
  report.stepsChecked += steps.length;
  report.lost += STEP_IDS.length - steps.filter((s) => s.state === "succeeded").length;
  const successes = (step: StepId) => attempts.filter((a) => a.run_id === stepRun(runId, step) && a.outcome === "succeeded").length;
  report.duplicated += STEP_IDS.filter((s) => successes(s) > 1).length;

  expect(run.state, JSON.stringify({ steps, attempts })).toBe("succeeded");
  expect(run.error).toBeNull();
  // The job's rows: its run and one per step, nothing else (a step's row has one key: made once).
  expect(jobRuns.map((r) => r.id)).toEqual([runId, ...STEP_IDS.map((s) => stepRun(runId, s))].sort());
  const rows = new Map(steps.map((s) => [s.id, s]));
  const view = new Map(run.steps!.map((s) => [s.id, s]));
  const hitsByStep = await Promise.all(STEP_IDS.map((s) => hitsOf(flow.urls[s])));
  for (const [i, step] of STEP_IDS.entries()) {
    const row = rows.get(stepRun(runId, step))!;
    const outcomes = attempts.filter((a) => a.run_id === row.id).map((a) => a.outcome);
    expect(row.state, `step ${step}`).toBe("succeeded");
    expect(outcomes, `attempts of step ${step}`).toEqual(expected.outcomes?.[step] ?? ["succeeded"]);
    expect(successes(step), `successes of step ${step}`).toBe(1);
    expect(JSON.parse(row.result!), `result of step ${step}`).toEqual(flow.results[step]);
    expect(view.get(step)).toMatchObject({ state: "succeeded", result: flow.results[step] });
    expect(view.get(step)!.attemptLog.map((a) => a.outcome)).toEqual(outcomes);
    // Made only once its parents had ended (and so, with them, decided once).
    for (const parent of PARENTS[step]) {
      expect(row.created_at, `step ${step} made before ${parent} ended`).toBeGreaterThanOrEqual(
        rows.get(stepRun(runId, parent))!.finished_at!,
      );
    }

    const hits = hitsByStep[i]!;
    expect(hits, `requests to step ${step}`).toHaveLength(expected.hits?.[step] ?? 1);
    // At least once: a redelivered dispatch calls its attempt's target again; every attempt called is one recorded.
    const attemptNumbers = hits.map((h) => h.headers["x-edgecron-attempt"]);
    const recorded = attempts.filter((a) => a.run_id === stepRun(runId, step)).length;
    expect(new Set(attemptNumbers).size, `step ${step}: attempts called (${attemptNumbers}) vs recorded`).toBe(
      Math.min(recorded, hits.length),
    );
    const upstream = Object.fromEntries(PARENTS[step].map((p) => [p, flow.results[p]]));
    for (const hit of hits) {
      expect(hit.headers).toMatchObject({
        "idempotency-key": `${runId}:${step}`,
        "x-edgecron-step": step,
        "x-edgecron-run-id": stepRun(runId, step),
        "x-edgecron-job-id": flow.job.id,
      });
      expect(attempts.some((a) => a.run_id === row.id && String(a.attempt) === hit.headers["x-edgecron-attempt"])).toBe(true);
      expect(JSON.parse(hit.body), `input of step ${step}`).toEqual({ runId, scheduledAt: run.scheduledAt, upstream });
    }
  }
}

function scenario(name: string, body: () => Promise<void>) {
  it(name, async () => {
    report.scenarios++;
    await body();
  });
}

// ---- the scenarios ----

describe("workflow runs under faults: a crash between steps loses nothing and records nothing twice", () => {
  scenario(
    "the consumer dies after a middle step's target answered, before reporting: the queue delivers it again, the same attempt runs again",
    async () => {
      // p is slower than b, so that b's report is the first this shard gets once the fault is armed.
      const flow = await newFlow("before-report", { b: 500, p: 1_500 });
      const runId = await trigger(flow);
      await onlyInFlight(flow, runId, "b", ["a"]); // p answers after b: the first report the fault can hit is b's
      const before = injected("consumer.beforeReport");
      armFault("consumer.beforeReport", 1, flow.job.shard);
      await faultFired("consumer.beforeReport", before);

      // b's target answered, its outcome never reached the shard: b is still on its first attempt, c not made.
      const b = (await stepRow(flow, runId, "b"))!;
      expect(b).toMatchObject({ state: "running", attempt: 1 });
      expect(await stepRow(flow, runId, "c")).toBeUndefined();
      expect((await getRun(runId)).state).toBe("running");

      // Its message was not acked: the queue delivers it again, and b's attempt calls its target again, under the same key.
      // (p, if its dispatch came in the same batch, went back with it and may have been called again too.)
      await waitForRun(runId, ["succeeded"], 20_000);
      const pHits = (await hitsOf(flow.urls.p)).length;
      expect([1, 2]).toContain(pHits);
      await checkFlow(flow, runId, { hits: { b: 2, p: pHits }, outcomes: { b: ["succeeded"] } });
      const hits = await hitsOf(flow.urls.b);
      expect(hits.map((h) => h.headers["x-edgecron-attempt"])).toEqual(["1", "1"]);
      expect(new Set(hits.map((h) => h.headers["idempotency-key"])).size).toBe(1);
    },
  );

  scenario("one report call of a middle step fails: the consumer's retry records it once, nothing runs twice", async () => {
    const flow = await newFlow("report-once", { b: 500 });
    const runId = await trigger(flow);
    await onlyInFlight(flow, runId, "b", ["p"]);
    const before = injected("consumer.report");
    armFault("consumer.report", 1, flow.job.shard);
    await faultFired("consumer.report", before);
    await checkFlow(flow, runId);
    // One message per release of steps: neither the failed report nor its retry sent anything twice.
    expect(await queueMessagesSent(flow)).toBe(RELEASES);
  });

  scenario(
    "every report of the root step fails: its outcome is kept on the queue, recorded later, and the steps below start once",
    async () => {
      const flow = await newFlow("report-all");
      const before = injected("consumer.report");
      armFault("consumer.report", REPORT_TRIES, flow.job.shard); // a runs alone: only its reports can fail
      const runId = await trigger(flow);
      await faultFired("consumer.report", before, REPORT_TRIES);
      // The kept outcome reaches the shard by the queue: a is called once and succeeds once.
      await checkFlow(flow, runId, { hits: { a: 1 }, outcomes: { a: ["succeeded"] } });
    },
  );

  scenario("the queue refuses the send of the step a report released: the shard sends it again by itself", async () => {
    const flow = await newFlow("queue-send", { b: 500 });
    const runId = await trigger(flow);
    await onlyInFlight(flow, runId, "b", ["p"]);
    const before = injected("shard.queueSend");
    armFault("shard.queueSend", Infinity, flow.job.shard); // b's report releases c: its send is refused
    await faultFired("shard.queueSend", before);
    expect(await stepRow(flow, runId, "c")).toMatchObject({ state: "running", attempt: 1 });
    expect(await outbox(flow)).toBe(1);
    expect(await hitsOf(flow.urls.c)).toHaveLength(0);
    disarmFault("shard.queueSend", flow.job.shard);
    // No help from the test: the shard re-armed its alarm for the send's retry (2 s).
    await checkFlow(flow, runId);
    expect(await outbox(flow)).toBe(0);
    expect(await queueMessagesSent(flow)).toBe(RELEASES);
  });

  scenario("the queue refuses the released step's send and the shard restarts: its lease ending sends it", async () => {
    const flow = await newFlow("send-evict", { b: 500 });
    const runId = await trigger(flow);
    await onlyInFlight(flow, runId, "b", ["p"]);
    const before = injected("shard.queueSend");
    armFault("shard.queueSend", Infinity, flow.job.shard);
    await faultFired("shard.queueSend", before);
    await expect.poll(() => outbox(flow)).toBe(1);
    await evictDurableObject(shardOf(flow.job)); // the unsent dispatch was in memory only
    report.platformFaults++;
    disarmFault("shard.queueSend", flow.job.shard);
    expect(await outbox(flow)).toBe(0); // the new instance does not know of it
    const c = (await stepRow(flow, runId, "c"))!;
    expect(c).toMatchObject({ state: "running", attempt: 1 });
    expect(await hitsOf(flow.urls.c)).toHaveLength(0);
    await makeRunDue(flow.job, c.id); // its lease ends now
    await checkFlow(flow, runId);
  });

  scenario("the alarm dies after committing a scheduled workflow run and its first step, before sending it", async () => {
    const flow = await newFlow("after-commit");
    const before = injected("shard.afterCommit");
    armFault("shard.afterCommit", 1, flow.job.shard);
    await fireNow(flow.job).catch((err: Error) => expect(err.message).toContain("injected fault"));
    // The runtime may have started the past-due alarm itself first: the fault is then its.
    await faultFired("shard.afterCommit", before);
    // The run and its root step committed with the dispatch kept unsent, or (if the platform
    // rolled the throwing handler's writes back) nothing yet: both are safe.
    const rows = await runInDurableObject(shardOf(flow.job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT id, state, parent_run_id FROM runs WHERE job_id = ? ORDER BY id", flow.job.id).toArray(),
    );
    expect(rows.map((r) => [r.parent_run_id === null ? "run" : "step", r.state])).toEqual(
      rows.length
        ? [
            ["run", "running"],
            ["step", "running"],
          ]
        : [],
    );
    expect(await hitsOf(flow.urls.a)).toHaveLength(0);
    await runAlarmNow(flow); // the runtime's retry of the alarm
    const [run] = await listRunIds(flow);
    await checkFlow(flow, run!);
  });

  scenario("the alarm dies after that commit and the shard restarts: the first step's lease ending sends it", async () => {
    const flow = await newFlow("commit-evict");
    const before = injected("shard.afterCommit");
    armFault("shard.afterCommit", 1, flow.job.shard);
    await fireNow(flow.job).catch((err: Error) => expect(err.message).toContain("injected fault"));
    // The runtime may have started the past-due alarm itself first: the fault is then its.
    await faultFired("shard.afterCommit", before);
    await evictDurableObject(shardOf(flow.job));
    report.platformFaults++;
    const runs = await listRunIds(flow);
    if (runs.length > 0) {
      expect(await hitsOf(flow.urls.a)).toHaveLength(0);
      await makeRunDue(flow.job, stepRun(runs[0]!, "a"));
    } else {
      await runAlarmNow(flow); // rolled back: the fire is still due
    }
    const [run] = await listRunIds(flow);
    await checkFlow(flow, run!);
  });

  scenario("the shard restarts while each step is in flight: a new instance records it and starts what follows", async () => {
    const flow = await newFlow("evict", { a: 300, b: 300, c: 300, p: 100, z: 300 });
    const runId = await trigger(flow);
    for (const step of ["a", "b", "c", "z"] as const) {
      await hitsArrived(flow, step);
      await evictDurableObject(shardOf(flow.job));
      report.platformFaults++;
    }
    await checkFlow(flow, runId);
  });

  scenario("a step's outcome reported again and again (a lost answer, a retried report) is recorded once", async () => {
    const flow = await newFlow("repeat-report", { a: 300 });
    const runId = await trigger(flow);
    await hitsArrived(flow, "a");
    // a's report releases b and p: their sends are held, so that this test plays b's consumer.
    armFault("shard.queueSend", Infinity, flow.job.shard);
    await expect.poll(async () => (await stepRow(flow, runId, "b"))?.state, { timeout: 10_000 }).toBe("running");
    const stub = shardOf(flow.job);
    const b = (await stepRow(flow, runId, "b"))!;
    // b's order, as the consumer would read it: it carries b's input, a's result.
    const [order] = await stub.open([{ runId: b.id, fence: b.fence }]);
    expect(order).toMatchObject({ result: "open", runId: b.id, step: { runId, stepId: "b" } });
    expect(JSON.parse((order as { input: string }).input).upstream).toEqual({ a: flow.results.a });

    const outcome: Outcome = { runId: b.id, fence: b.fence, ok: true, status: 200, error: null, result: JSON.stringify(flow.results.b) };
    expect(await stub.report([outcome, outcome])).toEqual(["recorded", "stale"]);
    // Again, twice at once, and once with another result: all stale, nothing changes.
    const forged = { ...outcome, result: JSON.stringify({ step: "b", value: "forged" }) };
    expect(
      await Promise.all([stub.report([outcome]), stub.report([forged]), stub.report([{ ...outcome, ok: false, status: 500 }])]),
    ).toEqual([["stale"], ["stale"], ["stale"]]);
    report.platformFaults += 4;
    expect(await stepRow(flow, runId, "c")).toMatchObject({ state: "running", attempt: 1 });

    disarmFault("shard.queueSend", flow.job.shard);
    await runAlarmNow(flow); // the held dispatches go: p's and c's; b's is not sent, its attempt has its outcome
    // b's target never saw a request: its outcome was the one reported here.
    await checkFlow(flow, runId, { hits: { b: 0 } });
    expect(JSON.parse((await stepRow(flow, runId, "b"))!.result!)).toEqual(flow.results.b);
  });

  scenario(
    "a step's dispatch delivered three times, twice in one batch and once in a batch at the same moment, is recorded once",
    async () => {
      const flow = await newFlow("dup-delivery", { b: 500 });
      const runId = await trigger(flow);
      await onlyInFlight(flow, runId, "b", ["p"]);
      armFault("shard.queueSend", Infinity, flow.job.shard); // c's own send is held back
      await expect.poll(async () => (await stepRow(flow, runId, "c"))?.state, { timeout: 10_000 }).toBe("running");
      const c = (await stepRow(flow, runId, "c"))!;
      const dispatch = { runId: c.id, fence: c.fence };
      await Promise.all([deliver(flow, [dispatch, dispatch]), deliver(flow, [dispatch])]);
      report.platformFaults += 2;
      // Copies in one batch call the target once; a copy in another batch may call it again (at
      // least once), as the same attempt under the same Idempotency-Key. One outcome is recorded.
      const hits = await hitsOf(flow.urls.c);
      expect(hits.length).toBeGreaterThanOrEqual(1);
      expect(hits.length).toBeLessThanOrEqual(2);
      expect(new Set(hits.map((h) => `${h.headers["idempotency-key"]} ${h.headers["x-edgecron-attempt"]}`))).toEqual(
        new Set([`${runId}:c 1`]),
      );

      // The shard's own copy of c's dispatch, kept while the queue refused it, is not sent: c has its outcome.
      disarmFault("shard.queueSend", flow.job.shard);
      await runAlarmNow(flow);
      await checkFlow(flow, runId, { hits: { c: hits.length } });
      // Every step's dispatch again, after the run ended: all stale, no target called again.
      const { steps } = await shardState(flow, runId);
      await deliver(
        flow,
        steps.map((s) => ({ runId: s.id, fence: s.fence })),
      );
      report.platformFaults += steps.length;
      await checkFlow(flow, runId, { hits: { c: hits.length } });
    },
  );

  scenario(
    "the shard's transaction dies after a middle step ended and released the next: all of it rolls back, the retried report does it once",
    async () => {
      const flow = await newFlow("step-ended", { b: 500 });
      const runId = await trigger(flow);
      await onlyInFlight(flow, runId, "b", ["p"]);
      const before = injected("shard.stepEnded");
      armFault("shard.stepEnded", 1, flow.job.id);
      await faultFired("shard.stepEnded", before);
      await checkFlow(flow, runId);
      expect(await queueMessagesSent(flow)).toBe(RELEASES);
    },
  );

  scenario(
    "the shard's transaction dies each time the last step ends the run: the run ends once, by the outcome kept on the queue",
    async () => {
      const flow = await newFlow("last-step-ended", { z: 400 });
      const runId = await trigger(flow);
      await onlyInFlight(flow, runId, "z", ["c", "p"]);
      const before = injected("shard.stepEnded");
      armFault("shard.stepEnded", REPORT_TRIES, flow.job.id);
      await faultFired("shard.stepEnded", before, REPORT_TRIES);
      // Nothing of z's end was kept by the shard; the consumer kept its outcome on the queue, and
      // its report, once the shard takes it, ends z and the run with it: z is called once.
      await checkFlow(flow, runId, { hits: { z: 1 }, outcomes: { z: ["succeeded"] } });
    },
  );

  // The shard's cost meter counts a run as finished from inside the transaction that ends it;
  // a rolled-back end must not count, or the retried report counts the run twice (found by this
  // suite: GET /v1/cost's runsFinished, perRun and usdPerMillionRuns were off).
  it("the cost meter counts a run that ended once as finished once, after a rolled-back end", async () => {
    const flow = await newFlow("meter", { z: 400 });
    const runId = await trigger(flow);
    await onlyInFlight(flow, runId, "z", ["c", "p"]);
    const before = injected("shard.stepEnded");
    armFault("shard.stepEnded", 1, flow.job.id); // z's end, and with it the run's, rolls back once
    await faultFired("shard.stepEnded", before);
    await checkFlow(flow, runId);
    expect(await runsFinished(flow)).toBe(1);
  });
});

/** The job's workflow runs (not their steps), from the shard. */
async function listRunIds(flow: Flow): Promise<string[]> {
  return runInDurableObject(shardOf(flow.job), (_s: Shard, state) =>
    state.storage.sql
      .exec("SELECT id FROM runs WHERE job_id = ? AND parent_run_id IS NULL ORDER BY id", flow.job.id)
      .toArray()
      .map((r) => r.id as string),
  );
}
