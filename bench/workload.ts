/** The steps of the burst workload (bench/README.md): calibration, creation, waiting, what arrived. */
import type { ApiOptions, Stack } from "../test/support/local-stack.ts";
import type { Options } from "./options.ts";
import type { Receiver } from "./receiver.ts";
import type { Result } from "./result.ts";
import type { QueueBatch } from "./stack-log.ts";
import { coveredMs, type Interval, maxOverlap, perSecond, round, summarize } from "./stats.ts";

export const iso = (ms: number) => new Date(ms).toISOString();
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const DAY_MS = 86_400_000;

export interface Reply {
  status: number | null;
  body: unknown;
  error: string | null;
  ms: number;
}

/**
 * An API call that never throws: a failed creation is counted, not retried (a retry of a
 * request that did reach the server would make a second job for the same index).
 */
export async function request(stack: Stack, method: string, path: string, body?: unknown, options: ApiOptions = {}): Promise<Reply> {
  const started = performance.now();
  try {
    const r = await stack.api(method, path, body, { timeoutMs: 30_000, ...options });
    return { status: r.status, body: r.json, error: null, ms: performance.now() - started };
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    return { status: null, body: null, error: `${e.name}: ${e.message}`, ms: performance.now() - started };
  }
}

/** Runs `count` tasks with at most `limit` in flight; `task(i)` must not throw. Stops early when `stop()` says so. */
export async function pool(count: number, limit: number, task: (i: number) => Promise<void>, stop: () => boolean = () => false) {
  let next = 0;
  const worker = async () => {
    while (next < count && !stop()) {
      const i = next;
      next++;
      await task(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  return next;
}

export interface Run {
  stack: Stack;
  receiver: Receiver;
  opts: Options;
  result: Result;
  /** A tenant's API key to create the jobs with; the stack's admin token when undefined. */
  token: string | undefined;
  say(message: string): void;
  stackDied(): boolean;
}

const createJob = (run: Run, at: string, url: string) =>
  request(run.stack, "POST", "/v1/jobs", { schedule: { at }, target: { url } }, { token: run.token });

/** The creation rate, measured on jobs due in 7 days, which never fire during the run. */
export async function calibrate(run: Run): Promise<number> {
  const { opts, receiver, result, say } = run;
  const C = opts.calibration;
  if (C === 0) {
    const rate = 200; // a guess; --calibration 0 is for debugging only
    result.calibration = { jobs: 0, assumedJobsPerSecond: rate };
    return rate;
  }
  const farAt = iso(Date.now() + 7 * DAY_MS);
  let ok = 0;
  const started = performance.now();
  await pool(
    C,
    opts.concurrency,
    async (i) => {
      const r = await createJob(run, farAt, `${receiver.url}/calibration/${i}`);
      if (r.status === 201) ok++;
    },
    run.stackDied,
  );
  const seconds = (performance.now() - started) / 1000;
  if (ok === 0) throw new Error("no calibration job could be created");
  const rate = ok / seconds;
  result.calibration = { jobs: C, created: ok, seconds: round(seconds, 3), jobsPerSecond: round(rate) };
  say(`calibration: ${ok}/${C} jobs in ${seconds.toFixed(2)} s = ${rate.toFixed(0)} jobs/s`);
  return rate;
}

/** T: the end of creation as estimated from `rate`, with the safety factor and the margin. */
export function chooseT({ opts, result, say }: Run, rate: number): number {
  const N = opts.jobs;
  const chosenAt = Date.now();
  const estimateMs = Math.ceil((N / rate) * 1000);
  const T = chosenAt + Math.ceil(estimateMs * opts.safety) + opts["margin-ms"];
  result.schedule = {
    T: iso(T),
    TEpochMs: T,
    chosenAt: iso(chosenAt),
    estimatedCreationMs: estimateMs,
    safety: opts.safety,
    marginMs: opts["margin-ms"],
    leadMs: T - chosenAt,
  };
  say(
    `T = ${iso(T)} (in ${((T - chosenAt) / 1000).toFixed(1)} s: ${N} jobs at ~${rate.toFixed(0)}/s × ${opts.safety} + ${opts["margin-ms"]} ms)`,
  );
  return T;
}

export type Created = { id: string; createdAt: number; ms: number } | { id?: undefined; error: string } | null;

/** Creates the N burst jobs, due at T; index i calls /burst/i. */
export async function createBurst(run: Run, T: number): Promise<Created[]> {
  const { opts, receiver, result, say } = run;
  const N = opts.jobs;
  const Tiso = iso(T);
  const jobs: Created[] = new Array<Created>(N).fill(null);
  const creationDeadline = T + opts["timeout-ms"];
  let created = 0;
  let failed = 0;
  let nextRunMismatch = 0;
  const failures = new Map<string, number>();
  const creationStarted = Date.now();
  let lastProgress = creationStarted;
  const attempted = await pool(
    N,
    opts.concurrency,
    async (i) => {
      const r = await createJob(run, Tiso, `${receiver.url}/burst/${i}`);
      const now = Date.now();
      const body = r.body as { id?: unknown; nextRunAt?: unknown } | null;
      if (r.status === 201 && typeof body?.id === "string") {
        jobs[i] = { id: body.id, createdAt: now, ms: r.ms };
        created++;
        if (body.nextRunAt !== Tiso) nextRunMismatch++;
      } else {
        jobs[i] = { error: r.error ?? `HTTP ${r.status}` };
        failed++;
        const key = r.error ? r.error.split(":")[0]! : `HTTP ${r.status} ${JSON.stringify(r.body).slice(0, 120)}`;
        failures.set(key, (failures.get(key) ?? 0) + 1);
      }
      if (now - lastProgress >= 5_000) {
        lastProgress = now;
        say(
          `created ${created}/${N} (${failed} failed), ${((created * 1000) / (now - creationStarted)).toFixed(0)} jobs/s, T ${now < T ? "in" : "passed"} ${(Math.abs(T - now) / 1000).toFixed(1)} s`,
        );
      }
    },
    () => run.stackDied() || Date.now() > creationDeadline,
  );
  const creationEnded = Date.now();
  const made = jobs.flatMap((j) => (j?.id ? [j] : []));
  const createdAfterT = made.filter((j) => j.createdAt > T).length;
  result.creation = {
    attempted,
    created,
    failed,
    notAttempted: N - attempted,
    failures: Object.fromEntries(failures),
    seconds: round((creationEnded - creationStarted) / 1000, 3),
    jobsPerSecond: round((created * 1000) / Math.max(1, creationEnded - creationStarted)),
    requestMs: summarize(made.map((j) => round(j.ms) ?? 0)),
    endedAt: iso(creationEnded),
    slackMs: T - creationEnded,
    createdAfterT,
    nextRunAtMismatch: nextRunMismatch,
  };
  say(
    `created ${created}/${N} in ${result.creation.seconds} s = ${result.creation.jobsPerSecond} jobs/s (${failed} failed); ` +
      (creationEnded <= T
        ? `finished ${((T - creationEnded) / 1000).toFixed(1)} s before T`
        : `LATE: finished ${((creationEnded - T) / 1000).toFixed(1)} s after T, ${createdAfterT} jobs created after T`),
  );
  return jobs;
}

/** Waits until every created job has arrived (then `settle-ms` more, for duplicates) or until T + `timeout-ms`; returns when it stopped. */
export async function waitForRuns(run: Run, T: number, expected: ReadonlySet<number>): Promise<number> {
  const { opts, receiver, say } = run;
  const receivedExpected = () => {
    let n = 0;
    for (const i of expected) if (receiver.firstReceipt.has(i)) n++;
    return n;
  };
  const waitDeadline = T + opts["timeout-ms"];
  let lastReport = Date.now();
  for (;;) {
    const now = Date.now();
    // Cheap test first: the set check only runs once enough distinct jobs have arrived.
    if (receiver.firstReceipt.size >= expected.size && receivedExpected() === expected.size) break;
    if (now > waitDeadline) {
      say(`timeout: ${opts["timeout-ms"]} ms after T, ${receivedExpected()}/${expected.size} received`);
      break;
    }
    if (run.stackDied()) throw new Error(`the stack exited while runs were due: ${JSON.stringify(run.stack.exited)}`);
    if (now - lastReport >= 5_000) {
      lastReport = now;
      say(
        now < T
          ? `waiting for T (${((T - now) / 1000).toFixed(1)} s)`
          : `received ${receiver.firstReceipt.size}/${expected.size}, T+${((now - T) / 1000).toFixed(1)} s`,
      );
    }
    await sleep(50);
  }
  if (receivedExpected() === expected.size) {
    say(`all ${expected.size} runs arrived; listening ${opts["settle-ms"]} ms more for duplicates`);
    const until = Date.now() + opts["settle-ms"];
    while (Date.now() < until && !run.stackDied()) await sleep(100);
  }
  return Date.now();
}

export interface Delivery {
  lost: number[];
  /** Jobs whose receipts carried more than one run id. */
  multiRunJobs: number[];
}

/** The figures of what arrived (result.delivery). */
export function analyseDelivery({ receiver, result }: Run, T: number, jobs: readonly Created[], expected: ReadonlySet<number>): Delivery {
  const Tiso = iso(T);
  const burst = receiver.receipts.filter((r) => r.kind === "burst");
  const byIndex = new Map<number, typeof burst>();
  for (const r of burst) {
    const list = byIndex.get(r.index!) ?? [];
    list.push(r);
    byIndex.set(r.index!, list);
  }
  const lagByJob = jobs.map((j, i) => {
    const got = receiver.firstReceipt.get(i);
    return j?.id && got !== undefined ? got - T : null;
  });
  const lags = lagByJob.filter((x) => x !== null);
  const lost = [...expected].filter((i) => !byIndex.has(i));
  const runIdCounts = new Map<string, number>();
  for (const r of burst) if (r.runId) runIdCounts.set(r.runId, (runIdCounts.get(r.runId) ?? 0) + 1);
  const repeatedRunIds = [...runIdCounts].filter(([, n]) => n > 1);
  const multiRunJobs = [...byIndex].filter(([, list]) => new Set(list.map((r) => r.runId)).size > 1).map(([i]) => i);
  const lagStats = summarize(lags);
  const first = lagStats.min;
  const lastFirst = lagStats.max;
  const lastAny = burst.length ? burst.reduce((m, r) => Math.max(m, r.t), -Infinity) - T : null;
  const lateCreated = jobs.flatMap((j, i) => (j?.id && j.createdAt > T ? [i] : []));
  result.delivery = {
    expected: expected.size,
    received: lags.length,
    lost: lost.length,
    lostIndexes: lost.slice(0, 100),
    lagMs: lagStats,
    firstArrivalMs: first,
    drainMs: lastFirst,
    lastReceiptMs: lastAny,
    drainJobsPerSecond:
      lags.length > 1 && first !== null && lastFirst !== null && lastFirst > first
        ? round(((lags.length - 1) * 1000) / (lastFirst - first))
        : null,
    earlyFires: lags.filter((x) => x < 0).length,
    duplicates: {
      receipts: burst.length,
      extraReceipts: burst.length - byIndex.size,
      runIdsReceivedMoreThanOnce: repeatedRunIds.length,
      jobsWithMoreThanOneRunId: multiRunJobs.length,
      receiptsWithAttemptAbove1: burst.filter((r) => r.attempt !== null && Number(r.attempt) > 1).length,
      examples: repeatedRunIds.slice(0, 10).map(([id, n]) => ({ runId: id, receipts: n })),
    },
    scheduledAtHeaderMismatch: burst.filter((r) => r.scheduledAt !== Tiso).length,
    missingRunIdHeader: burst.filter((r) => !r.runId).length,
    unexpected: {
      calibrationFires: receiver.receipts.filter((r) => r.kind === "calibration").length,
      unknownPaths: receiver.receipts.filter((r) => r.kind === "unknown").length,
      fromJobsWhoseCreationFailed: burst.filter((r) => !expected.has(r.index!)).length,
    },
    lateCreatedJobs: lateCreated.length,
    lagMsOfLateCreatedJobs: summarize(lateCreated.flatMap((i) => lagByJob[i] ?? [])),
    arrivalsPerSecondAfterT: perSecond(lags),
  };
  // Kept for the JSON file, out of the summary: one entry per job.
  result.delivery.lagMsByJob = lagByJob;
  return { lost, multiRunJobs };
}

/** The queue batches the stack logged during the burst (result.queue). */
export function analyseQueue({ result }: Run, T: number, waitEnded: number, all: readonly QueueBatch[]): void {
  const batches = all.filter((b) => b.endedAt >= T - 1_000 && b.endedAt <= waitEnded);
  const timed = batches.flatMap((b) => (b.ms === null ? [] : [{ ...b, ms: b.ms }]));
  const intervals: Interval[] = timed.map((b) => [b.endedAt - b.ms, b.endedAt]);
  result.queue = {
    batchesDuringBurst: batches.length,
    messages: batches.reduce((a, b) => a + b.size, 0),
    acked: batches.reduce((a, b) => a + b.acked, 0),
    batchSize: summarize(batches.map((b) => b.size)),
    batchMs: summarize(timed.map((b) => b.ms)),
    maxConcurrentBatches: maxOverlap(intervals),
    consumerBusyMs: coveredMs(intervals),
    firstBatchEndedMs: batches.length ? batches[0]!.endedAt - T : null,
    lastBatchEndedMs: batches.length ? batches.at(-1)!.endedAt - T : null,
    batchesOverall: all.length,
  };
}

interface RunItem {
  state: string;
  attempts: number;
  startedAt?: string | null;
  finishedAt?: string | null;
}

/**
 * Reads back, through GET /v1/jobs/:id/runs, `sample` jobs spread over the burst and up to 20
 * lost and 20 duplicated ones: what the receiver cannot see (states, claim and report times).
 */
export async function readRunsSample(run: Run, T: number, jobs: readonly Created[], expected: ReadonlySet<number>, d: Delivery) {
  const { opts, receiver, result } = run;
  const sampleSet = new Set<number>();
  const createdIdx = [...expected];
  const S = Math.min(opts.sample, createdIdx.length);
  for (let k = 0; k < S; k++) sampleSet.add(createdIdx[Math.floor((k * createdIdx.length) / S)]!);
  for (const i of [...d.lost.slice(0, 20), ...d.multiRunJobs.slice(0, 20)]) sampleSet.add(i);
  const sampleIdx = [...sampleSet];
  const sample: Array<{ i: number; r: Reply }> = [];
  await pool(
    sampleIdx.length,
    8,
    async (k) => {
      const i = sampleIdx[k]!;
      const r = await request(run.stack, "GET", `/v1/jobs/${jobs[i]!.id}/runs?limit=10`, undefined, { timeoutMs: 10_000 });
      sample.push({ i, r });
    },
    run.stackDied,
  );
  const states: Record<string, number> = {};
  const claimLag: number[] = [];
  const claimToReceipt: number[] = [];
  const receiptToReport: number[] = [];
  let runsApiErrors = 0;
  for (const { i, r } of sample) {
    const items = (r.body as { items?: unknown } | null)?.items;
    if (r.status !== 200 || !Array.isArray(items)) {
      runsApiErrors++;
      continue;
    }
    const runs = items as RunItem[];
    const key = runs.length === 0 ? "no run" : runs.map((x) => `${x.state}/${x.attempts}`).join(",");
    states[key] = (states[key] ?? 0) + 1;
    const first = runs[0];
    if (first?.startedAt) {
      const started = Date.parse(first.startedAt);
      claimLag.push(started - T);
      const got = receiver.firstReceipt.get(i);
      if (got !== undefined) claimToReceipt.push(got - started);
      if (got !== undefined && first.finishedAt) receiptToReport.push(Date.parse(first.finishedAt) - got);
    }
  }
  result.runsApiSample = {
    jobs: sample.length,
    errors: runsApiErrors,
    statesAndAttempts: states,
    claimedMsAfterT: summarize(claimLag),
    claimToReceiptMs: summarize(claimToReceipt),
    receiptToReportMs: summarize(receiptToReport),
  };
}
