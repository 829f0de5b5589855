import type { Server } from "node:http";
import { afterAll, describe, expect, it } from "vitest";
import { type Stack, sleep, startStack } from "../support/local-stack";
import { type Hit, startReceiver } from "../support/receiver";

/**
 * The whole stack, crashed and restarted: N one-off jobs fall due within a few seconds;
 * while their requests are being delivered (some of them in flight at the target), every
 * process of the stack (start.mjs, wrangler, workerd) is killed with SIGKILL at once, as a
 * power cut would. The stack is then started again on the same state directory and port.
 * Every job must end with exactly one run, succeeded; the target must have seen every run and
 * nothing else; every attempt must carry the run id as its Idempotency-Key.
 *
 * What the crash loses is left to the product to recover: the local Queue keeps its messages
 * in memory, so a dispatch lost with it is sent again when its attempt's lease ends (the queue's
 * allowance, CLAIM_TIMEOUT_MS, plus the attempt's timeout and 5 s), under the same fence. The figures (how
 * many runs were in flight or lost, how long convergence took) are printed on one line starting
 * with `crash-test:`.
 */

/**
 * 400 by default: enough for the kill to land among dispatched, executing and unreported runs of
 * several batches, in about a minute; CRASH_JOBS=1000 (or more) for a longer run.
 */
const N = Number(process.env.CRASH_JOBS) || 400;
/** Jobs created first, due in 7 days (they never fire here), to measure the creation rate... */
const CALIBRATION = 150;
/** ...once the first ones have woken the shards up (the first calls to a shard are slower). */
const CALIBRATION_WARMUP = 50;
const CREATE_CONCURRENCY = 16;
/** The jobs' instants are spread over this window after T. */
const SPREAD_MS = 4_000;
/** Slack between the estimated end of creation and T. */
const LEAD_MS = 3_000;
const CREATION_SAFETY = 1.5;
/** The receiver answers after this long, so that requests are in flight when the kill comes. */
const RECEIVER_DELAY_MS = 200;
const JOB_TIMEOUT_MS = 2_000;
/**
 * The kill costs a run at most one attempt; the others are headroom for a loaded machine, where
 * a 2 s timeout can expire before the receiver's answer is read (seen: ~3% of attempts).
 */
const MAX_ATTEMPTS = 5;
/**
 * The kill comes once the receiver has seen this share of the runs: random in [0.2, 0.5), so
 * that runs of the test hit different points of a batch's delivery (it is printed; set
 * CRASH_AT_FRACTION to repeat one).
 */
const CRASH_AT_FRACTION = Number(process.env.CRASH_AT_FRACTION) || 0.2 + Math.random() * 0.3;
const CLAIM_TIMEOUT_MS = 3_000;
const SWEEP_INTERVAL_MS = 3_000;
const CONVERGE_TIMEOUT_MS = 120_000;
const READ_CONCURRENCY = 8;
/** A bound on each batch of API calls (creating the jobs, reading their runs). */
const PHASE_BUDGET_MS = 90_000;
const NON_FINAL = ["queued", "running", "retry_wait"];

// ---- the stack ----

/** Every start of the stack, in order; the last one is the one the API calls go to. */
const stacks: Stack[] = [];
/** Lines of each start's output that report an error (counted for the summary, not asserted), and the first 3 of each. */
const errorLines: number[] = [];
const errorExamples: string[][] = [];
let receiver: { url: string; server: Server; hits: Map<string, Hit[]> } | undefined;

function countErrors(start: number): (line: string) => void {
  errorLines[start] = 0;
  errorExamples[start] = [];
  return (line) => {
    if (/Reloading local server/.test(line)) return;
    if (/ERROR|Error|error|failed|unreachable|did not confirm|✘/.test(line) && !/update available|trace-stream|tail session/.test(line)) {
      errorLines[start]!++;
      // biome-ignore lint/suspicious/noControlCharactersInRegex: it strips the ANSI colour codes wrangler writes
      if (errorExamples[start]!.length < 3) errorExamples[start]!.push(line.replace(/\x1b\[[0-9;]*[A-Za-z]/g, "").slice(0, 200));
    }
  };
}

/** The stacks' own output, for a failure message; only its tail is kept. */
const tail = (lines = 80) => stacks.at(-1)?.tail(lines) ?? "";

// ---- the API ----

const api = (method: string, path: string, body?: unknown, timeoutMs = 20_000) => stacks.at(-1)!.api(method, path, body, { timeoutMs });

/** Runs `task(i)` for i < count with at most `limit` in flight; starts none after `budgetMs`. */
async function pool(what: string, count: number, limit: number, budgetMs: number, task: (i: number) => Promise<void>): Promise<void> {
  const deadline = Date.now() + budgetMs;
  let next = 0;
  const worker = async () => {
    while (next < count && Date.now() <= deadline) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  if (next < count) throw new Error(`${what}: only ${next} of ${count} done within ${budgetMs} ms\n${tail()}`);
}

/**
 * Creates `count` one-off jobs; `at(i)` is read when request i is sent. Failed creations are
 * not retried (a request that reached the server would make a second job): they fail the test.
 */
async function createJobs(
  count: number,
  at: (i: number) => number,
  path: string,
): Promise<{ jobs: Array<{ id: string; at: number }>; doneAt: number[] }> {
  const jobs: Array<{ id: string; at: number }> = new Array(count);
  const doneAt: number[] = [];
  const failures: string[] = [];
  await pool(`creating ${count} jobs`, count, CREATE_CONCURRENCY, PHASE_BUDGET_MS, async (i) => {
    const instant = at(i);
    try {
      const res = await api("POST", "/v1/jobs", {
        schedule: { at: new Date(instant).toISOString() },
        target: { url: `${receiver!.url}/hit/${path}?delayMs=${RECEIVER_DELAY_MS}`, method: "POST" },
        retry: { maxAttempts: MAX_ATTEMPTS },
        timeoutMs: JOB_TIMEOUT_MS,
      });
      if (res.status !== 201) failures.push(`job ${i}: HTTP ${res.status} ${JSON.stringify(res.json).slice(0, 300)}`);
      else {
        jobs[i] = { id: res.json.id, at: instant };
        doneAt.push(Date.now());
      }
    } catch (err) {
      failures.push(`job ${i}: ${(err as Error).message}`);
    }
  });
  if (failures.length > 0)
    throw new Error(`${failures.length} of ${count} creations failed, e.g. ${failures.slice(0, 3).join("; ")}\n${tail()}`);
  return { jobs, doneAt };
}

async function metrics(): Promise<any> {
  const res = await api("GET", "/v1/metrics?window=1h");
  if (res.status !== 200) throw new Error(`GET /v1/metrics: HTTP ${res.status} ${JSON.stringify(res.json)}`);
  return res.json;
}

const sum = (counts: Record<string, number>, states: string[]) => states.reduce((n, s) => n + (counts[s] ?? 0), 0);
const total = (counts: Record<string, number>) => Object.values(counts).reduce((n, v) => n + v, 0);
/** The run id edgecron derives for a scheduled fire (src/model/ids.ts). */
const runIdOf = (jobId: string, at: number) => `run_${jobId.slice("job_".length)}_${at.toString(36)}`;
const countBy = <T>(items: T[], key: (t: T) => string) =>
  items.reduce<Record<string, number>>((acc, t) => {
    acc[key(t)] = (acc[key(t)] ?? 0) + 1;
    return acc;
  }, {});

afterAll(async () => {
  const failures: string[] = [];
  // Each stop fails if a process of its stack (wrangler, workerd) survives SIGKILL.
  for (const stack of stacks) await stack.stop().catch((err: Error) => failures.push(err.message));
  if (receiver) {
    receiver.server.closeAllConnections();
    await new Promise<void>((resolve) => receiver!.server.close(() => resolve()));
  }
  if (failures.length > 0) throw new Error(failures.join("\n"));
});

describe("a whole-stack crash (SIGKILL of wrangler, workerd and all) in the middle of a burst", () => {
  it("ends every one-off job with exactly one succeeded run after a restart on the same state", { timeout: 300_000 }, async () => {
    const t0 = Date.now();
    const summary: Record<string, unknown> = { ok: false, jobs: N };
    const since = (t: number) => Date.now() - t;
    try {
      receiver = await startReceiver();
      receiver.server.keepAliveTimeout = 30_000;
      // 2. The target: records every request, answers 200 after RECEIVER_DELAY_MS.
      const hits = () => receiver!.hits.get("crash") ?? [];

      // 1. The stack, as npm start runs it.
      const first = await startStack({
        // A snapshot of the sources: both starts run the same code, and an edit of the working tree cannot reload it.
        snapshot: true,
        label: "run 1",
        onLine: countErrors(0),
        env: { CLAIM_TIMEOUT_MS: String(CLAIM_TIMEOUT_MS), SWEEP_INTERVAL_MS: String(SWEEP_INTERVAL_MS) },
      });
      stacks.push(first);
      summary.startMs = since(t0);

      // 3. Calibration (due in 7 days), then the N jobs due at T + [0, SPREAD_MS).
      const calStart = Date.now();
      const { doneAt } = await createJobs(CALIBRATION, () => calStart + 7 * 86_400_000, "calibration");
      const ratePerMs = (CALIBRATION - CALIBRATION_WARMUP) / Math.max(1, doneAt.at(-1)! - doneAt[CALIBRATION_WARMUP - 1]!);
      const T = Date.now() + Math.ceil((N / ratePerMs) * CREATION_SAFETY) + LEAD_MS;
      const createStart = Date.now();
      const { jobs } = await createJobs(N, (i) => T + Math.floor((i * SPREAD_MS) / N), "crash");
      const createdAt = Date.now();
      Object.assign(summary, {
        createMs: createdAt - createStart,
        createPerSecond: Math.round((N / Math.max(1, createdAt - createStart)) * 1000),
        createdBeforeFirstDueMs: T - createdAt,
      });
      expect(new Set(jobs.map((j) => j.id)).size).toBe(N);
      const expected = new Map(jobs.map((j) => [runIdOf(j.id, j.at), j]));

      // 4. The kill, once creation is over and the receiver has seen ~30% of the runs.
      const crashDeadline = Math.max(T, createdAt) + 60_000;
      const seenIds = () => new Set(hits().map((h) => h.headers["x-edgecron-run-id"]));
      while (seenIds().size < N * CRASH_AT_FRACTION) {
        if (first.exited) throw new Error(`the stack exited before the crash (${JSON.stringify(first.exited)})\n${tail()}`);
        if (Date.now() > crashDeadline) {
          throw new Error(
            `only ${seenIds().size} of ${N} runs reached the receiver within 60 s of T\n${JSON.stringify(await metrics().catch((e) => String(e)))}\n${tail()}`,
          );
        }
        await sleep(10);
      }
      const crashAt = Date.now();
      // Fails unless every thread of the group is gone and the port refuses connections within 10 s.
      const { groupGoneMs, portClosedMs } = await first.kill9();
      Object.assign(summary, { groupGoneAfterKillMs: groupGoneMs, portClosedAfterKillMs: portClosedMs });
      const hitsAtCrash = hits().filter((h) => h.receivedAt <= crashAt);
      const seenBeforeCrash = new Set(hitsAtCrash.map((h) => h.headers["x-edgecron-run-id"]));
      Object.assign(summary, {
        crashAtFraction: Number(CRASH_AT_FRACTION.toFixed(3)),
        crashAfterFirstDueMs: crashAt - T,
        receivedAtCrash: seenBeforeCrash.size,
        // Received, and not yet answered when the kill came (the receiver answers after RECEIVER_DELAY_MS).
        unansweredAtCrash: hitsAtCrash.filter((h) => h.receivedAt > crashAt - RECEIVER_DELAY_MS).length,
      });

      // 5. The same stack again, on the same state and port.
      const second = await first.restart({ label: "run 2", onLine: countErrors(1) });
      stacks.push(second);
      const readyAt = Date.now();
      summary.downMs = readyAt - crashAt;

      // 6. Until every run is final: cheap polling of the metrics, then a check of every job.
      let last: any;
      const convergeDeadline = readyAt + CONVERGE_TIMEOUT_MS;
      for (;;) {
        if (second.exited) throw new Error(`the restarted stack exited (${JSON.stringify(second.exited)})\n${tail()}`);
        try {
          last = await metrics();
          const byState = last.runsByState as Record<string, number>;
          if (total(byState) >= N && sum(byState, NON_FINAL) === 0) break;
        } catch (err) {
          last = String(err);
        }
        if (Date.now() > convergeDeadline) {
          // A few of the runs still open, whole, to say where they stopped.
          const open: unknown[] = [];
          for (const [id] of expected) {
            if (open.length >= 3) break;
            const r = await api("GET", `/v1/runs/${id}`).catch((e: Error) => ({ json: String(e) }));
            const run = r.json as { state?: string };
            if (run?.state && NON_FINAL.includes(run.state)) open.push(run);
          }
          throw new Error(
            `runs not final ${CONVERGE_TIMEOUT_MS} ms after the restart: ${JSON.stringify(last)}\nsome open runs: ${JSON.stringify(open)}\n${tail(200)}`,
          );
        }
        await sleep(500);
      }
      const convergedAt = Date.now();
      Object.assign(summary, {
        convergeAfterRestartMs: convergedAt - readyAt,
        convergeAfterCrashMs: convergedAt - crashAt,
        runsByState: last.runsByState,
        fireLagMs: last.fireLagMs,
      });
      // Any late request (an attempt given up on whose request still went out) would come now.
      await sleep(1_000);

      // 7. Every job: exactly one run, the one of its instant, succeeded.
      const runs = new Map<string, any>();
      const problems: string[] = [];
      await pool(`reading the runs of ${N} jobs`, N, READ_CONCURRENCY, PHASE_BUDGET_MS, async (i) => {
        const job = jobs[i]!;
        const res = await api("GET", `/v1/jobs/${job.id}/runs?limit=10`);
        if (res.status !== 200) return void problems.push(`${job.id}: GET runs HTTP ${res.status}`);
        const items = res.json.items as any[];
        if (items.length !== 1) problems.push(`${job.id}: ${items.length} runs: ${JSON.stringify(items)}`);
        for (const run of items) runs.set(run.id, run);
      });
      const runList = [...runs.values()];
      const seen = new Map<string, Hit[]>();
      for (const hit of hits()) {
        const id = hit.headers["x-edgecron-run-id"] ?? "(none)";
        seen.set(id, [...(seen.get(id) ?? []), hit]);
      }
      const multiAttempt = runList.filter((r) => r.attempts > 1);
      const logs = new Map<string, any>();
      await pool(`reading ${multiAttempt.length} retried runs`, multiAttempt.length, READ_CONCURRENCY, PHASE_BUDGET_MS, async (i) => {
        const res = await api("GET", `/v1/runs/${multiAttempt[i]!.id}`);
        if (res.status === 200) logs.set(res.json.id, res.json);
      });
      const retriedAttempts = [...logs.values()].flatMap((r) => (r.attemptLog as any[]).map((a) => ({ ...a, runId: r.id as string })));
      const attemptOutcomes = countBy(retriedAttempts, (a) => a.outcome);
      // Why attempts did not succeed (numbers blanked), and whether the receiver got those requests.
      const attemptErrors = countBy(
        retriedAttempts.filter((a) => a.outcome !== "succeeded"),
        (a) =>
          `${a.outcome}: ${String(a.error).replace(/\d+/g, "#").slice(0, 80)}${(seen.get(a.runId) ?? []).some((h) => Number(h.headers["x-edgecron-attempt"]) === a.attempt) ? " (received)" : " (not received)"}`,
      );
      const receivedTwice = [...seen.values()].filter((list) => list.length > 1);
      Object.assign(summary, {
        receiverHits: hits().length,
        runsWithMoreThanOneAttempt: multiAttempt.length,
        runsReceivedMoreThanOnce: receivedTwice.length,
        // Retried, yet the target saw one request: an attempt was dispatched but its request never went out (killed first).
        runsRetriedButReceivedOnce: multiAttempt.filter((r) => (seen.get(r.id)?.length ?? 0) === 1).length,
        // Not seen before the kill and delivered on the first attempt after it: their dispatches were lost with the queue, or not yet due.
        runsFirstReceivedAfterRestart: runList.filter((r) => !seenBeforeCrash.has(r.id)).length,
        attemptOutcomesOfRetriedRuns: attemptOutcomes,
        attemptErrors,
        maxAttempts: Math.max(0, ...runList.map((r) => r.attempts)),
        reloads: stacks.map((s) => s.reloads),
        stackErrorLines: errorLines,
        stackErrorExamples: errorExamples.flat(),
        totalMs: since(t0),
      });

      expect(problems, problems.slice(0, 5).join("\n")).toEqual([]);
      expect(runs.size).toBe(N);
      expect(last.runsByState).toEqual({ succeeded: N });
      for (const [id, job] of expected) {
        const run = runs.get(id);
        expect(run, `job ${job.id}: no run ${id}`).toBeDefined();
        expect(run).toMatchObject({ jobId: job.id, trigger: "schedule", state: "succeeded", status: 200, error: null });
        expect(run.scheduledAt).toBe(new Date(job.at).toISOString());
      }
      // The receiver saw every run, and nothing but these runs.
      expect(
        [...seen.keys()].filter((id) => !expected.has(id)),
        "run ids the receiver saw that no job has",
      ).toEqual([]);
      expect(
        [...expected.keys()].filter((id) => !seen.has(id)),
        "runs the receiver never saw",
      ).toEqual([]);
      for (const [id, list] of seen) {
        const run = runs.get(id)!;
        for (const hit of list) {
          expect(hit.method).toBe("POST");
          expect(hit.headers["idempotency-key"], `an attempt of ${id}`).toBe(id);
          expect(hit.headers["x-edgecron-job-id"]).toBe(run.jobId);
          expect(hit.headers["x-edgecron-scheduled-at"]).toBe(run.scheduledAt);
        }
        // Only recorded attempts, the last (succeeded) one among them. An attempt may arrive twice
        // (at least once): a dispatch whose consumer the kill cut short is delivered again.
        const attempts = list.map((h) => Number(h.headers["x-edgecron-attempt"]));
        expect(
          attempts.every((a) => Number.isInteger(a) && a >= 1 && a <= run.attempts),
          `run ${id}: attempts ${attempts} of ${run.attempts}`,
        ).toBe(true);
        expect(attempts, `run ${id}: its succeeded attempt ${run.attempts} never reached the receiver`).toContain(run.attempts);
      }
      summary.ok = true;
    } finally {
      summary.totalMs ??= since(t0);
      console.log(`crash-test: ${JSON.stringify(summary)}`);
    }
  });
});
