// One BullMQ worker process of the bench's BullMQ peer (bench/bullmq.ts starts them, one per
// core by default). Its processor makes the call an edgecron run makes: POST to the job's URL,
// no body, 30 s timeout, with the same identity headers, so the same receiver and analysis
// serve both systems. Retries are the queue's (attempts 3, exponential backoff with full
// jitter, set on each job); a call fails the attempt as edgecron's executor does: 5xx, 408,
// 429, a timeout or a network error are retried, other 4xx are not.
//
// Parent ↔ child over IPC: the child sends { type: "ready" } once its Worker is connected;
// the parent sends { type: "stop" }; the child closes its Worker (waiting for the jobs it
// runs), sends { type: "stats", … } and exits. If the parent goes away, it closes and exits.
import { type Job, UnrecoverableError, Worker } from "bullmq";

export interface WorkerStats {
  type: "stats";
  pid: number;
  /** Attempts whose call answered 2xx. */
  succeeded: number;
  /** Attempts that failed (to be retried, or not), by reason. */
  failedAttempts: Record<string, number>;
  /** Jobs whose scheduled instant came from opts.prevMillis (scheduler jobs) / data.scheduledAt (one-off jobs). */
  instantFrom: { prevMillis: number; data: number; none: number };
  /** Scheduler jobs whose id (repeat:<scheduler>:<millis>) names another instant than opts.prevMillis. */
  idInstantMismatch: number;
  workerErrors: string[];
}

export interface JobData {
  url: string;
  index: number;
  /** One-off (burst) jobs: the intended instant, ISO. Scheduler (steady) jobs carry it in opts.prevMillis. */
  scheduledAt?: string;
}

const port = Number(process.env.BENCH_REDIS_PORT);
const queueName = process.env.BENCH_QUEUE ?? "bench";
const concurrency = Number(process.env.BENCH_WORKER_CONCURRENCY);
if (!Number.isSafeInteger(concurrency) || concurrency < 1)
  throw new Error(`BENCH_WORKER_CONCURRENCY: not a concurrency: ${process.env.BENCH_WORKER_CONCURRENCY}`);
const TIMEOUT_MS = 30_000;

const stats: WorkerStats = {
  type: "stats",
  pid: process.pid,
  succeeded: 0,
  failedAttempts: {},
  instantFrom: { prevMillis: 0, data: 0, none: 0 },
  idInstantMismatch: 0,
  workerErrors: [],
};
const fail = (reason: string) => {
  stats.failedAttempts[reason] = (stats.failedAttempts[reason] ?? 0) + 1;
};

/** The instant the job was scheduled for, epoch ms. */
function instantOf(job: Job<JobData>): number | null {
  const prev = job.opts.prevMillis;
  if (typeof prev === "number") {
    stats.instantFrom.prevMillis++;
    const fromId = Number(String(job.id).split(":").at(-1));
    if (fromId !== prev) stats.idInstantMismatch++;
    return prev;
  }
  if (job.data.scheduledAt) {
    stats.instantFrom.data++;
    return Date.parse(job.data.scheduledAt);
  }
  stats.instantFrom.none++;
  return null;
}

async function processor(job: Job<JobData>): Promise<void> {
  const instant = instantOf(job);
  const headers: Record<string, string> = {
    "Idempotency-Key": String(job.id),
    "X-Edgecron-Run-Id": String(job.id),
    "X-Edgecron-Job-Id": job.repeatJobKey ?? `${job.name}-${job.data.index}`,
    "X-Edgecron-Attempt": String(job.attemptsMade + 1),
  };
  if (instant !== null) headers["X-Edgecron-Scheduled-At"] = new Date(instant).toISOString();
  let res: Response;
  try {
    res = await fetch(job.data.url, { method: "POST", headers, signal: AbortSignal.timeout(TIMEOUT_MS) });
    await res.arrayBuffer();
  } catch (err) {
    const name = err instanceof Error ? err.name : "Error";
    fail(name === "TimeoutError" ? "timeout" : `network: ${name}`);
    throw err;
  }
  if (res.ok) {
    stats.succeeded++;
    return;
  }
  fail(`HTTP ${res.status}`);
  const retried = res.status >= 500 || res.status === 408 || res.status === 429;
  throw retried ? new Error(`HTTP ${res.status}`) : new UnrecoverableError(`HTTP ${res.status}`);
}

const worker = new Worker<JobData>(queueName, processor, {
  connection: { host: "127.0.0.1", port },
  concurrency,
});
worker.on("error", (err) => {
  if (stats.workerErrors.length < 20) stats.workerErrors.push(String(err?.message ?? err));
});

let closing: Promise<void> | null = null;
function stop(): Promise<void> {
  closing ??= (async () => {
    await worker.close().catch((err: Error) => stats.workerErrors.push(`close: ${err.message}`));
    if (process.connected) await new Promise<void>((resolve) => process.send!(stats, () => resolve()));
    process.exit(0);
  })();
  return closing;
}

process.on("message", (m: { type?: string }) => {
  if (m?.type === "stop") void stop();
});
// The parent went away (it crashed, or was SIGKILLed): nothing would ever stop this worker.
process.on("disconnect", () => void stop());
// Ctrl-C in the terminal reaches the parent only (this process has its own group); SIGTERM from it or anyone: stop cleanly.
process.on("SIGTERM", () => void stop());

await worker.waitUntilReady();
process.send?.({ type: "ready", pid: process.pid });
