// edgecron under the bench's workloads (bench/README.md): the local stack, started and stopped
// by test/support/local-stack.ts as for the e2e tests, gets the jobs through its API and calls
// the bench's receiver. Talks only to 127.0.0.1. Always stops the stack it started.
import { randomBytes } from "node:crypto";
import { loadavg } from "node:os";
import { relative } from "node:path";
import { freePort, type Stack, startStack } from "../test/support/local-stack.ts";
import { analyseDelivery } from "./burst.ts";
import { readCost } from "./cost.ts";
import { startCpuProfile } from "./cpu-profile.ts";
import {
  calibrate,
  chooseT,
  cpuFigures,
  cpuWindow,
  createAll,
  createdIndexes,
  HOST,
  iso,
  newResult,
  otherReceipts,
  pathOf,
  ROOT,
  type SystemContext,
  waitForRuns,
  warmUp,
  windowOf,
} from "./harness.ts";
import { localEdgecronInFlight } from "./in-flight.ts";
import { type Receiver, startReceiver } from "./receiver.ts";
import type { Result } from "./result.ts";
import { type StackLog, stackLog } from "./stack-log.ts";
import { round } from "./stats.ts";
import { analyseSteady } from "./steady.ts";
import { analyseQueue, createJob, deleteJobs, type Run, readRunsSample } from "./workload.ts";

/** Runs the workload on edgecron's local stack; never throws: a failure is in `result.harness`. */
export async function runEdgecron(ctx: SystemContext): Promise<Result> {
  const { opts, say, t0 } = ctx;
  const logPath = `${ctx.pathBase}.log`;
  const result = newResult(
    "edgecron",
    ctx,
    logPath,
    Object.fromEntries(
      ["SHARD_COUNT", "CLAIM_TIMEOUT_MS", "SWEEP_INTERVAL_MS"].flatMap((k) => (process.env[k] ? [[k, process.env[k]]] : [])),
    ),
  );
  const log: StackLog = stackLog(logPath, t0);
  const starting = new AbortController();
  let stack: Stack | null = null;
  let receiver: Receiver | null = null;
  let stopping: Promise<void> | null = null;
  /** Once only, whoever asks first (a signal or the end of the run); never throws. */
  const stopStack = (): Promise<void> => {
    if (stack) stopping ??= stack.stop().catch((err: Error) => say(`stopping the stack: ${err.message}`));
    return stopping ?? Promise.resolve();
  };
  // The main flow sees the stack gone (or its start aborted), stops, and writes what it has.
  const unregister = ctx.onInterrupt(async () => {
    say("stopping the stack");
    starting.abort();
    await stopStack();
  });

  try {
    // ---- 1. receiver and stack
    receiver = await startReceiver(HOST);
    result.code!.ranFrom = opts["in-place"] ? "working tree" : "snapshot of the working tree";
    result.code!.devRegistry = "private (WRANGLER_REGISTRY_PATH in the temporary dir)";
    result.code!.topology = opts.topology;
    say(`edgecron: starting the stack, topology ${opts.topology} (log: ${relative(ROOT, logPath)}); receiver on ${receiver.url}`);
    const startupStarted = Date.now();
    // --profile: wrangler's inspector on a port of our own (scripts/start.mjs reads INSPECTOR_PORT).
    const inspectorPort = opts.profile ? await freePort() : null;
    stack = await startStack({
      topology: opts.topology,
      ...(inspectorPort !== null && { env: { INSPECTOR_PORT: String(inspectorPort) } }),
      token: randomBytes(16).toString("hex"),
      // A reload in the middle of a run restarts the shards and loses the local queue's messages:
      // a snapshot keeps edits to the working tree from reaching the stack.
      snapshot: !opts["in-place"],
      readyTimeoutMs: opts["startup-timeout-ms"],
      onLine: log.onLine,
      signal: starting.signal,
      dirPrefix: "edgecron-bench-",
      keepDir: opts["keep-state"],
      killOnExit: true,
    });
    const live = stack;
    result.startup = { readyAfterMs: Date.now() - startupStarted, port: live.port, workDir: live.dir };
    say(`stack ready on ${live.base} after ${((Date.now() - startupStarted) / 1000).toFixed(1)} s`);
    const readyAt = Date.now();

    const run: Run = {
      stack: live,
      receiver,
      opts,
      result,
      token: undefined,
      say,
      failure: () =>
        ctx.interrupt.aborted ? "interrupted" : live.exited !== null ? `the stack exited: ${JSON.stringify(live.exited)}` : null,
    };
    const inFlight = localEdgecronInFlight(ROOT);
    result.callsInFlight = {
      total: inFlight.total,
      how: `${inFlight.perInvocation} connections per consumer invocation × ${inFlight.invocations} dispatch queues, one batch at a time each locally`,
    };
    if (opts.as === "tenant") {
      // The real path: a tenant made through the API, its own key, every limit its default
      // unless an option sets it (and then the summary says so).
      const setByBench: Record<string, number> = {};
      if (opts["tenant-max-in-flight"] > 0) setByBench.maxRunsInFlight = opts["tenant-max-in-flight"];
      if (opts["tenant-max-jobs"] > 0) setByBench.maxJobs = opts["tenant-max-jobs"];
      const body = { name: "bench", ...(Object.keys(setByBench).length > 0 && { limits: setByBench }) };
      const r = await live.api("POST", "/v1/tenants", body, { timeoutMs: 30_000 });
      const tenant = r.json as { id?: unknown; apiKey?: unknown; limits?: Record<string, number | null> };
      if (r.status !== 201 || typeof tenant.apiKey !== "string")
        throw new Error(`could not create the bench tenant: ${r.status} ${JSON.stringify(r.json)}`);
      run.token = tenant.apiKey;
      // Every call made with its key counts its rate-limit refusals here (the admin token is never limited).
      run.throttled = { refusals: 0, waitedMs: 0 };
      result.tenant = { as: "tenant", id: String(tenant.id), ...(tenant.limits && { limits: tenant.limits }), setByBench };
      say(`jobs belong to a tenant made through the API, limits ${JSON.stringify(tenant.limits)}`);
    } else {
      result.tenant = { as: "admin" };
      say("jobs are created with the admin token (no tenant, no limits)");
    }

    // ---- 2. warm-up, calibration, T, creation: one job per request
    const remove = (ids: readonly string[]) => deleteJobs(run, ids);
    await warmUp(run, 1, async (from, _to, at) => [await createJob(run, at, `${receiver!.url}/warmup/${from}`, true)], remove);
    const rate = await calibrate(
      run,
      1,
      async (from, _to, at) => [await createJob(run, at, `${receiver!.url}/calibration/${from}`)],
      remove,
    );
    const T = chooseT(run, rate);
    const jobs = await createAll(run, T, 1, async (i) => [await createJob(run, T, `${receiver!.url}${pathOf(opts, i)}`)]);
    const failure = run.failure();
    if (failure) throw new Error(`during creation: ${failure}`);
    if (result.creation?.created === 0) throw new Error("nothing could be created");

    // ---- 3. wait for the runs, measuring what they cost the machine's CPU over the window
    // every system is measured over
    const cpu = cpuWindow(T, [{ pgid: live.pgid }], opts["settle-ms"]);
    const profiling = (async () => {
      await cpu.before;
      return inspectorPort === null ? null : await startCpuProfile(inspectorPort);
    })();
    const expected = createdIndexes(jobs);
    const { ended: waitEnded, complete } = await waitForRuns(run, T, expected);
    result.waitEndedAt = iso(waitEnded);
    const cpuBefore = await cpu.before;
    const profiler = await profiling;
    result.cpu = cpuFigures(receiver, T, cpu.from, cpuBefore, cpu.end(receiver, complete));
    if (profiler) {
      const profile = await profiler.stop(`${ctx.pathBase}.cpuprofile`);
      if (result.cpu) result.cpu.profile = profile;
    }

    // ---- 4. what arrived; 5. the stack's own view: its log, and (burst) a sample through the runs API
    if (opts.workload === "burst") {
      const delivery = analyseDelivery(run, T, jobs, expected);
      analyseQueue(run, T, waitEnded, log.observed.queueBatches);
      await readRunsSample(run, T, jobs, expected, delivery);
    } else {
      result.steady = analyseSteady(receiver.receipts, expected, windowOf(opts, T));
      result.otherReceipts = otherReceipts(receiver);
      analyseQueue(run, T, waitEnded, log.observed.queueBatches);
    }
    result.stackLog = {
      reloadsAfterReady: log.observed.reloads.filter((at) => at >= readyAt).map((at) => at - T),
      sweeps: log.observed.sweeps.map(({ at, ...sweep }) => ({ ...sweep, atMsFromT: at - T })),
      errorLines: log.observed.errorLines,
      errorExamples: log.observed.errorExamples,
      workerdTailStreamErrors: log.observed.tailStreamErrors,
      apiRequestsLogged: log.observed.apiRequests,
    };
    // ---- 6. what it cost, as the scheduler's meters counted it
    try {
      result.cost = await readCost(live, t0, {
        jobsCreated: (result.warmup?.created ?? 0) + (result.calibration?.created ?? 0) + (result.creation?.created ?? 0),
        rateLimited: run.throttled?.refusals ?? 0,
      });
    } catch (err) {
      say(`reading the cost: ${(err as Error).message}`);
    }
    result.harness.ok = true;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    result.harness.error = ctx.interrupt.aborted ? "interrupted" : err instanceof Error ? (err.stack ?? message) : message;
    say(`harness error: ${ctx.interrupt.aborted ? result.harness.error : message}`);
  } finally {
    await stopStack();
    unregister();
    await log.close();
    await receiver?.close();
    result.environment.loadavgAtEnd = loadavg().map((x) => round(x, 2));
    result.finishedAt = iso(Date.now());
  }
  return result;
}
