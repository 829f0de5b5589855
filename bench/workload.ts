/** edgecron's side of the workloads (bench/README.md): its jobs, their creation through the API, its queue batches, its runs API. */
import type { ApiOptions, Stack } from "../test/support/local-stack.ts";
import type { Delivery } from "./burst.ts";
import { type Created, type Harness, iso, type Made, pool, STEADY_CRON, sleep, steadyEndMs } from "./harness.ts";
import type { Options } from "./options.ts";
import type { QueueBatch } from "./stack-log.ts";
import { coveredMs, type Interval, maxOverlap, summarize } from "./stats.ts";

export interface Reply {
  status: number | null;
  body: unknown;
  error: string | null;
  ms: number;
}

/** The longest the bench waits out one call's rate-limit refusals before counting it failed. */
const MAX_THROTTLED_MS = 300_000;

/**
 * Seconds of a Retry-After header as the API sends it (delay-seconds); 1 when absent or not a
 * number, the API's smallest.
 */
export function retryAfterMs(header: string | null): number {
  const seconds = header === null ? Number.NaN : Number(header.trim());
  return Number.isFinite(seconds) && seconds >= 0 ? Math.max(1, seconds) * 1000 : 1000;
}

/**
 * An API call that never throws. A 429 is the tenant's rate limit refusing the request before
 * it does anything, so it is waited out (Retry-After) and asked again, and counted in `throttled`;
 * any other failure is counted, not retried (a retry of a request that did reach the server
 * would make a second job for the same index). `ms` includes the waits.
 */
async function request(
  stack: Stack,
  method: string,
  path: string,
  body?: unknown,
  options: ApiOptions = {},
  throttled?: Harness["throttled"],
): Promise<Reply> {
  const started = performance.now();
  for (;;) {
    let r: Awaited<ReturnType<Stack["api"]>>;
    try {
      r = await stack.api(method, path, body, { timeoutMs: 30_000, ...options });
    } catch (err) {
      const e = err instanceof Error ? err : new Error(String(err));
      return { status: null, body: null, error: `${e.name}: ${e.message}`, ms: performance.now() - started };
    }
    if (r.status === 429 && throttled && performance.now() - started < MAX_THROTTLED_MS) {
      const wait = retryAfterMs(r.headers.get("retry-after"));
      throttled.refusals++;
      throttled.waitedMs += wait;
      await sleep(wait);
      continue;
    }
    return { status: r.status, body: r.json, error: null, ms: performance.now() - started };
  }
}

/** An edgecron run: the shared harness, the local stack, and the token to create jobs with. */
export interface Run extends Harness {
  stack: Stack;
  /** A tenant's API key to create the jobs with; the stack's admin token when undefined. */
  token: string | undefined;
}

/**
 * The body of POST /v1/jobs for job or schedule `i`, first due at T: burst (and the warm-up), a
 * one-off at T; steady, every second from T to T + (D − 1) s. Everything else is edgecron's default.
 */
function jobBody(opts: Options, T: number, url: string, oneOff: boolean): unknown {
  if (oneOff || opts.workload === "burst") return { schedule: { at: iso(T) }, target: { url } };
  return {
    schedule: { cron: STEADY_CRON, startAt: iso(T), endAt: iso(steadyEndMs(T, opts["duration-s"])) },
    target: { url },
  };
}

/** Creates one job through the API; its first fire (nextRunAt) should be T. `oneOff`: a one-off whatever the workload (the warm-up). */
export async function createJob(run: Run, T: number, url: string, oneOff = false): Promise<Made> {
  const r = await request(run.stack, "POST", "/v1/jobs", jobBody(run.opts, T, url, oneOff), { token: run.token }, run.throttled);
  const body = r.body as { id?: unknown; nextRunAt?: unknown; error?: { code?: unknown } } | null;
  if (r.status === 201 && typeof body?.id === "string") return { id: body.id, nextMismatch: body.nextRunAt !== iso(T) };
  // The code names the refusal (quota_exceeded: the tenant's maxJobs), so the summary can say which.
  const code = typeof body?.error?.code === "string" ? ` ${body.error.code}` : "";
  return { error: r.error ?? `HTTP ${r.status}${code}` };
}

/** Deletes jobs the bench made for itself alone (warm-up, calibration); true for each one gone. */
export async function deleteJobs(run: Run, ids: readonly string[]): Promise<boolean[]> {
  return Promise.all(
    ids.map(async (id) => {
      const r = await request(run.stack, "DELETE", `/v1/jobs/${id}`, undefined, { token: run.token }, run.throttled);
      return r.status === 200;
    }),
  );
}

/** The queue batches the stack logged from T − 1 s to the end of the wait (result.queue). */
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
 * lost and 20 duplicated ones: what the receiver cannot see (states, dispatch and report times).
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
    () => run.failure() !== null,
  );
  const states: Record<string, number> = {};
  const dispatchLag: number[] = [];
  const dispatchToReceipt: number[] = [];
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
      dispatchLag.push(started - T);
      const got = receiver.firstReceipt.get(i);
      if (got !== undefined) dispatchToReceipt.push(got - started);
      if (got !== undefined && first.finishedAt) receiptToReport.push(Date.parse(first.finishedAt) - got);
    }
  }
  result.runsApiSample = {
    jobs: sample.length,
    errors: runsApiErrors,
    statesAndAttempts: states,
    dispatchedMsAfterT: summarize(dispatchLag),
    dispatchToReceiptMs: summarize(dispatchToReceipt),
    receiptToReportMs: summarize(receiptToReport),
  };
}
