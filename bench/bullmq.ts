// The BullMQ peer (bench/README.md): the same workloads on BullMQ + Redis on the same machine.
// A private redis-server (bench/redis.ts), worker processes (bench/bullmq-worker.ts) whose
// jobs make the same HTTP call an edgecron run makes to the same receiver, and this process
// as the producer. Talks only to 127.0.0.1. Always stops the workers and redis it started.
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, relative } from "node:path";
import { type Job, Queue } from "bullmq";
import { Redis } from "ioredis";
import { eachLine } from "../test/support/lines.ts";
import type { JobData, WorkerStats } from "./bullmq-worker.ts";
import { analyseDelivery } from "./burst.ts";
import {
  calibrate,
  chooseT,
  cpuFigures,
  cpuWindow,
  createAll,
  createdIndexes,
  HOST,
  iso,
  type Made,
  newResult,
  otherReceipts,
  pathOf,
  ROOT,
  STEADY_CRON,
  type SystemContext,
  steadyEndMs,
  waitForRuns,
  warmUp,
  windowOf,
} from "./harness.ts";
import { localEdgecronInFlight } from "./in-flight.ts";
import { bullmqConcurrency, type Options } from "./options.ts";
import type { Group } from "./process-cpu.ts";
import { type Receiver, startReceiver } from "./receiver.ts";
import { findRedisServer, REDIS_INSTALL, type RedisServer, startRedis } from "./redis.ts";
import type { Result } from "./result.ts";
import { stackLog } from "./stack-log.ts";
import { round } from "./stats.ts";
import { analyseSteady } from "./steady.ts";

const QUEUE = "bench";
/** Burst jobs are added with queue.addBulk, this many per call (--concurrency calls in flight). */
const ADD_BULK_CHUNK = 100;
/** edgecron's default retry: 3 attempts in all; delays uniform in [0, 1 s], then [0, 2 s]. */
const JOB_OPTIONS = { attempts: 3, backoff: { type: "exponential", delay: 1_000, jitter: 1 } } as const;

const versionOf = (pkg: string): string | null => {
  try {
    return (JSON.parse(readFileSync(join(ROOT, "node_modules", pkg, "package.json"), "utf8")) as { version: string }).version;
  } catch {
    return null;
  }
};

/** The setup the results record (bench/README.md explains each choice). */
const bullmqSetup = (opts: Options, concurrency: number, appendfsync: "everysec" | null) => ({
  bullmq: versionOf("bullmq"),
  ioredis: versionOf("ioredis"),
  workerProcesses: opts["bullmq-workers"],
  concurrencyPerWorker: concurrency,
  redisPersistence: appendfsync ? `appendonly yes, appendfsync ${appendfsync}` : "none (no RDB, no AOF)",
  jobOptions: JOB_OPTIONS,
  requestTimeoutMs: 30_000,
  addBulkChunk: ADD_BULK_CHUNK,
  burst: "queue.addBulk, each job { delay: T − now, timestamp: now }; X-Edgecron-Scheduled-At from job.data.scheduledAt (T)",
  steady: `queue.upsertJobScheduler(id, { pattern: "${STEADY_CRON}", startDate: T − 1 ms, endDate: T + (D − 1) s + 500 ms }); X-Edgecron-Scheduled-At from job.opts.prevMillis`,
  runId: "the BullMQ job id (steady: repeat:<scheduler id>:<instant ms>)",
  keptJobs: "completed and failed jobs are kept (BullMQ's default), so that the queue's counts can be read at the end",
});

interface WorkerProcess {
  child: ChildProcess;
  ready: boolean;
  exited: { code: number | null; signal: NodeJS.Signals | null } | null;
  stats: WorkerStats | null;
}

/** Starts `n` worker processes and waits until each Worker is connected. */
async function startWorkers(
  opts: Options,
  concurrency: number,
  port: number,
  onLine: (line: string, stream: "stdout" | "stderr") => void,
  started: WorkerProcess[],
): Promise<void> {
  for (let k = 0; k < opts["bullmq-workers"]; k++) {
    const child = spawn(process.execPath, [join(ROOT, "bench", "bullmq-worker.ts")], {
      cwd: ROOT,
      // Its own process group: a Ctrl-C in the terminal reaches the bench only, which stops it in order.
      detached: true,
      stdio: ["ignore", "pipe", "pipe", "ipc"],
      env: {
        ...process.env,
        BENCH_REDIS_PORT: String(port),
        BENCH_QUEUE: QUEUE,
        BENCH_WORKER_CONCURRENCY: String(concurrency),
      },
    });
    const w: WorkerProcess = { child, ready: false, exited: null, stats: null };
    started.push(w);
    const killOnExit = () => {
      if (w.exited === null && child.pid)
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {}
    };
    process.on("exit", killOnExit);
    child.on("exit", (code, signal) => {
      w.exited = { code, signal };
      process.off("exit", killOnExit);
    });
    child.on("error", (err) => {
      w.exited ??= { code: null, signal: null };
      onLine(`[worker ${k}] could not start: ${err.message}`, "stderr");
    });
    child.on("message", (m: { type?: string }) => {
      if (m?.type === "ready") w.ready = true;
      else if (m?.type === "stats") w.stats = m as WorkerStats;
    });
    eachLine(child, (line, name) => onLine(`[worker ${k}] ${line}`, name));
  }
  const deadline = Date.now() + 30_000;
  while (!started.every((w) => w.ready)) {
    const dead = started.find((w) => w.exited !== null);
    if (dead) throw new Error(`a BullMQ worker process exited before it was ready: ${JSON.stringify(dead.exited)}`);
    if (Date.now() > deadline) throw new Error("the BullMQ worker processes were not ready after 30 s");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const exitOf = (w: WorkerProcess, timeoutMs: number) =>
  w.exited !== null
    ? Promise.resolve(true)
    : new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), timeoutMs);
        w.child.once("exit", () => {
          clearTimeout(timer);
          resolve(true);
        });
      });

/** Asks each worker to close (it finishes the jobs it runs and sends its stats); SIGKILL after 15 s. */
async function stopWorkers(workers: readonly WorkerProcess[]): Promise<void> {
  await Promise.all(
    workers.map(async (w) => {
      if (w.exited !== null) return;
      if (w.child.connected) w.child.send({ type: "stop" });
      else if (w.child.pid)
        try {
          process.kill(-w.child.pid, "SIGTERM");
        } catch {}
      if (await exitOf(w, 15_000)) return;
      if (w.child.pid)
        try {
          process.kill(-w.child.pid, "SIGKILL");
        } catch {}
      await exitOf(w, 5_000);
    }),
  );
}

/** Redis INFO as numbers where they are numbers. */
async function redisInfo(client: Redis): Promise<Record<string, string>> {
  const text = await client.info();
  return Object.fromEntries(
    text.split(/\r?\n/).flatMap((line) => {
      const i = line.indexOf(":");
      return i > 0 && !line.startsWith("#") ? [[line.slice(0, i), line.slice(i + 1)]] : [];
    }),
  );
}

/** One item per job of the chunk: its id, or the error. */
const madeOf = (jobs: readonly Job[], expectedId?: (k: number) => string): Made[] =>
  jobs.map((job, k) =>
    job?.id ? { id: String(job.id), nextMismatch: expectedId ? String(job.id) !== expectedId(k) : false } : { error: "no job id" },
  );

/** Runs the workload on BullMQ + Redis (with its AOF fsynced every second: `appendfsync`); never throws: a failure is in `result.harness`. */
export async function runBullmq(ctx: SystemContext, appendfsync: "everysec" | null): Promise<Result> {
  const { opts, say, t0 } = ctx;
  const logPath = `${ctx.pathBase}.log`;
  const result = newResult(appendfsync ? "bullmq-aof" : "bullmq", ctx, logPath);
  // As many calls in flight as edgecron's local consumer can have, unless told otherwise.
  const edgecronInFlight = localEdgecronInFlight(ROOT).total;
  const concurrency = bullmqConcurrency(opts, edgecronInFlight);
  result.bullmq = { setup: bullmqSetup(opts, concurrency, appendfsync) };
  result.callsInFlight = {
    total: opts["bullmq-workers"] * concurrency,
    how: `${opts["bullmq-workers"]} worker processes × concurrency ${concurrency}${opts["bullmq-concurrency"] > 0 ? " (--bullmq-concurrency)" : ` (edgecron's ${edgecronInFlight} shared among them)`}`,
  };
  const log = stackLog(logPath, t0);
  let receiver: Receiver | null = null;
  let redis: RedisServer | null = null;
  const workers: WorkerProcess[] = [];
  let queue: Queue<JobData> | null = null;
  let client: Redis | null = null;
  let stopping: Promise<void> | null = null;
  /** Workers first (they finish what they run), then the producer's connections, then redis. Once; never throws. */
  const stopAll = (): Promise<void> => {
    stopping ??= (async () => {
      await stopWorkers(workers).catch((err: Error) => say(`stopping the BullMQ workers: ${err.message}`));
      await queue?.close().catch(() => {});
      client?.disconnect();
      await redis?.stop();
    })();
    return stopping;
  };
  const unregister = ctx.onInterrupt(async () => {
    say("stopping the BullMQ workers and redis-server");
    await stopAll();
  });

  try {
    const binary = findRedisServer();
    if (!binary) throw new Error(`redis-server not found; install it: ${REDIS_INSTALL}`);
    receiver = await startReceiver(HOST);
    say(
      `${result.system}: starting redis-server (${result.bullmq.setup.redisPersistence}) and ${opts["bullmq-workers"]} worker processes × concurrency ${concurrency} (log: ${relative(ROOT, logPath)}); receiver on ${receiver.url}`,
    );
    const startupStarted = Date.now();
    redis = await startRedis({ binary, appendfsync, onLine: log.onLine, keepDir: opts["keep-state"] });
    const live = redis;
    result.bullmq.setup.redis = live.version;
    const connection = { host: HOST, port: live.port };
    await startWorkers(opts, concurrency, live.port, log.onLine, workers);
    // The producer fails fast rather than queueing commands while redis is unreachable.
    queue = new Queue<JobData>(QUEUE, { connection: { ...connection, enableOfflineQueue: false } });
    await queue.waitUntilReady();
    client = new Redis({ ...connection, lazyConnect: true, maxRetriesPerRequest: 1 });
    await client.connect();
    const infoBefore = await redisInfo(client);
    result.startup = { readyAfterMs: Date.now() - startupStarted, port: live.port, workDir: live.dir };
    say(
      `redis ${live.version ?? "?"} on port ${live.port} and ${workers.length} workers ready after ${((Date.now() - startupStarted) / 1000).toFixed(1)} s`,
    );

    const h = {
      receiver,
      opts,
      result,
      say,
      failure: () => {
        if (ctx.interrupt.aborted) return "interrupted";
        if (live.exited !== null) return `redis-server exited: ${JSON.stringify(live.exited)}`;
        const dead = workers.find((w) => w.exited !== null);
        return dead ? `a BullMQ worker process exited: ${JSON.stringify(dead.exited)}` : null;
      },
    };
    const q = queue;
    const url = (path: string) => `${receiver!.url}${path}`;
    const D = opts["duration-s"];

    // ---- warm-up, calibration, T, creation
    const addOneOffs = async (from: number, to: number, at: number, kind: "burst" | "calibration" | "warmup") => {
      const now = Date.now();
      const jobs = Array.from({ length: to - from }, (_, k) => ({
        name: kind,
        data: { url: url(kind === "burst" ? pathOf(opts, from + k) : `/${kind}/${from + k}`), index: from + k, scheduledAt: iso(at) },
        opts: { ...JOB_OPTIONS, timestamp: now, delay: Math.max(0, at - now) },
      }));
      return madeOf(await q.addBulk(jobs));
    };
    const removeJobs = (ids: readonly string[]) => Promise.all(ids.map(async (id) => (await q.remove(id)) === 1));
    await warmUp(h, ADD_BULK_CHUNK, (from, to, at) => addOneOffs(from, to, at, "warmup"), removeJobs);
    let T: number;
    let items: Awaited<ReturnType<typeof createAll>>;
    if (opts.workload === "burst") {
      T = chooseT(h, await calibrate(h, ADD_BULK_CHUNK, (from, to, at) => addOneOffs(from, to, at, "calibration"), removeJobs));
      items = await createAll(h, T, ADD_BULK_CHUNK, (from, to) => addOneOffs(from, to, T, "burst"));
    } else {
      const upsert = async (id: string, index: number, path: string, at: number) => {
        // startDate one ms before T: BullMQ's first fire is the first cron instant strictly after startDate.
        const job = await q.upsertJobScheduler(
          id,
          { pattern: STEADY_CRON, startDate: at - 1, endDate: steadyEndMs(at, D) },
          { name: "steady", data: { url: url(path), index }, opts: JOB_OPTIONS },
        );
        return madeOf([job], () => `repeat:${id}:${at}`);
      };
      // A scheduler's first job is named repeat:<scheduler id>:<ms>; removing the scheduler removes that job too.
      const removeSchedulers = (ids: readonly string[]) =>
        Promise.all(ids.map(async (id) => q.removeJobScheduler(/^repeat:(.+):\d+$/.exec(id)?.[1] ?? id)));
      T = chooseT(
        h,
        await calibrate(h, 1, (from, _to, at) => upsert(`calibration-${from}`, from, `/calibration/${from}`, at), removeSchedulers),
      );
      items = await createAll(h, T, 1, (from) => upsert(`steady-${from}`, from, pathOf(opts, from), T));
    }
    const failure = h.failure();
    if (failure) throw new Error(`during creation: ${failure}`);
    if (result.creation?.created === 0) throw new Error("nothing could be created");

    // ---- wait, with the CPU of redis-server and the workers over the window edgecron's is measured over
    const groups: Group[] = [
      { pgid: live.pid, label: "redis-server" },
      ...workers.flatMap((w, k) => (w.child.pid ? [{ pgid: w.child.pid, label: `bullmq worker ${k + 1}` }] : [])),
    ];
    const cpu = cpuWindow(T, groups, opts["settle-ms"]);
    const expected = createdIndexes(items);
    const { ended: waitEnded, complete } = await waitForRuns(h, T, expected);
    result.waitEndedAt = iso(waitEnded);
    result.cpu = cpuFigures(receiver, T, cpu.from, await cpu.before, cpu.end(receiver, complete));
    if (opts.workload === "burst") analyseDelivery(h, T, items, expected);
    else {
      result.steady = analyseSteady(receiver.receipts, expected, windowOf(opts, T));
      result.otherReceipts = otherReceipts(receiver);
    }

    // ---- BullMQ's own view: the queue's counts, redis' counters, the workers' stats
    const counts = await q.getJobCounts();
    const infoAfter = await redisInfo(client);
    const num = (info: Record<string, string>, key: string) => Number(info[key] ?? Number.NaN);
    const commands = num(infoAfter, "total_commands_processed") - num(infoBefore, "total_commands_processed");
    await stopWorkers(workers);
    const stats = workers.flatMap((w) => (w.stats ? [w.stats] : []));
    result.bullmq.jobCounts = counts;
    result.bullmq.workers = stats;
    result.bullmq.redis = {
      version: live.version,
      appendfsync: appendfsync ?? "no",
      commandsProcessed: commands,
      commandsPerCompletedJob: counts.completed ? round(commands / counts.completed, 2) : null,
      aofRewrites: appendfsync ? round(num(infoAfter, "aof_rewrites") - num(infoBefore, "aof_rewrites"), 0) : null,
      usedMemoryPeakMb: round(num(infoAfter, "used_memory_peak") / 2 ** 20, 1),
      window: "from the workers being ready (before the warm-up) to the end of the wait",
    };
    result.stackLog = {
      reloadsAfterReady: [],
      sweeps: [],
      errorLines: log.observed.errorLines,
      errorExamples: log.observed.errorExamples,
      workerdTailStreamErrors: 0,
      apiRequestsLogged: 0,
    };
    result.harness.ok = true;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    result.harness.error = ctx.interrupt.aborted ? "interrupted" : err instanceof Error ? (err.stack ?? message) : message;
    say(`harness error: ${ctx.interrupt.aborted ? result.harness.error : message}`);
  } finally {
    await stopAll();
    unregister();
    await log.close();
    await receiver?.close();
    result.environment.loadavgAtEnd = loadavg().map((x) => round(x, 2));
    result.finishedAt = iso(Date.now());
  }
  return result;
}
