// The "burst" benchmark: N one-off jobs all due at the same instant T, each calling a loopback
// receiver; measures how late and how completely the runs arrive. The workload is defined in
// bench/README.md. Run it as `npm run bench` (or `npm run bench -- --jobs 1000`): npm puts the
// project's Node 22 first on PATH, which runs this TypeScript as is (type stripping) and starts
// the stack with that same Node.
//
// The stack is started and stopped by test/support/local-stack.ts, as for the e2e tests. Talks
// only to 127.0.0.1. Always stops the stack it started.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { type Stack, startStack } from "../test/support/local-stack.ts";
import { costLines, readCost } from "./cost.ts";
import { type Options, parseOptions, UsageError, usage } from "./options.ts";
import { type Receiver, startReceiver } from "./receiver.ts";
import { summaryLines } from "./report.ts";
import type { Result } from "./result.ts";
import { type StackLog, stackLog } from "./stack-log.ts";
import { round } from "./stats.ts";
import { analyseDelivery, analyseQueue, calibrate, chooseT, createBurst, iso, type Run, readRunsSample, waitForRuns } from "./workload.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const RESULTS_DIR = join(ROOT, "bench", "results");
const HOST = "127.0.0.1";

function gitState(): { commit: string | null; uncommittedChanges: string[] | null } {
  const git = (...args: string[]) => {
    const r = spawnSync("git", args, { cwd: ROOT, encoding: "utf8", timeout: 10_000 });
    return r.status === 0 ? r.stdout.trim() : null;
  };
  const dirty = git("status", "--porcelain", "--", "src", "scripts", "migrations", "wrangler.toml", "package.json");
  return { commit: git("rev-parse", "HEAD"), uncommittedChanges: dirty === null ? null : dirty.split("\n").filter(Boolean) };
}

async function main(opts: Options): Promise<number> {
  const t0 = Date.now();
  const stamp = iso(t0).replace(/[:.]/g, "-");
  mkdirSync(RESULTS_DIR, { recursive: true });
  const logPath = join(RESULTS_DIR, `burst-${stamp}.log`);
  const jsonPath = join(RESULTS_DIR, `burst-${stamp}.json`);
  const say = (msg: string) => console.log(`[bench +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

  const nodeMajor = Number(process.versions.node.split(".")[0]);
  if (nodeMajor < 22) say(`warning: running on Node ${process.version}; use \`npm run bench\` to get the project's Node 22`);

  const result: Result = {
    workload: "burst",
    formatVersion: 1,
    startedAt: iso(t0),
    options: opts,
    environment: {
      node: process.version,
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? null,
      totalMemMb: Math.round(totalmem() / 2 ** 20),
      loadavgAtStart: loadavg().map((x) => round(x, 2)),
      stackEnv: Object.fromEntries(
        ["SHARD_COUNT", "CLAIM_TIMEOUT_MS", "SWEEP_INTERVAL_MS"].flatMap((k) => (process.env[k] ? [[k, process.env[k]]] : [])),
      ),
    },
    logPath: relative(ROOT, logPath),
    harness: { ok: false, error: null },
  };

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
  let interrupted: NodeJS.Signals | null = null;
  const onSignal = (signal: NodeJS.Signals) => {
    // A second signal: leave now; the stack's exit hook (killOnExit) SIGKILLs its group.
    if (interrupted) process.exit(130);
    interrupted = signal;
    say(`${signal}: stopping the stack`);
    // The main flow sees the stack gone (or its start aborted), stops, and writes what it has.
    // Failing that, leave anyway.
    starting.abort();
    void stopStack();
    setTimeout(() => process.exit(130), 20_000).unref();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  try {
    // ---- 1. receiver and stack
    receiver = await startReceiver(HOST);
    result.code = gitState();
    result.code.ranFrom = opts["in-place"] ? "working tree" : "snapshot of the working tree";
    result.code.devRegistry = "private (WRANGLER_REGISTRY_PATH in the temporary dir)";
    say(`starting the stack (log: ${relative(ROOT, logPath)}); receiver on ${receiver.url}`);
    const startupStarted = Date.now();
    stack = await startStack({
      token: randomBytes(16).toString("hex"),
      // A reload in the middle of a burst restarts the shards and loses the local queue's messages:
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
      stackDied: () => live.exited !== null,
    };
    const maxInFlight = opts["tenant-max-in-flight"];
    if (maxInFlight > 0) {
      // Flow control on the path: every run of the burst goes through the tenant's gate.
      const limits = { maxJobs: null, requestsPerSecond: null, maxRunsInFlight: maxInFlight };
      const r = await live.api("POST", "/v1/tenants", { name: "bench", limits }, { timeoutMs: 30_000 });
      const apiKey = (r.json as { apiKey?: unknown }).apiKey;
      if (r.status !== 201 || typeof apiKey !== "string")
        throw new Error(`could not create the bench tenant: ${r.status} ${JSON.stringify(r.json)}`);
      run.token = apiKey;
      result.tenant = { maxRunsInFlight: maxInFlight };
      say(`jobs belong to a tenant with maxRunsInFlight ${maxInFlight}`);
    }

    // ---- 2. calibration, T, creation of the N burst jobs
    const T = chooseT(run, await calibrate(run));
    const jobs = await createBurst(run, T);
    if (run.stackDied()) throw new Error(`the stack exited during creation: ${JSON.stringify(live.exited)}`);
    if (result.creation?.created === 0) throw new Error("no burst job could be created");

    // ---- 3. wait for the runs
    const expected = new Set(jobs.flatMap((j, i) => (j?.id ? [i] : [])));
    const waitEnded = await waitForRuns(run, T, expected);
    result.waitEndedAt = iso(waitEnded);

    // ---- 4. what arrived; 5. the stack's own view: its log, and a sample through the runs API
    const delivery = analyseDelivery(run, T, jobs, expected);
    analyseQueue(run, T, waitEnded, log.observed.queueBatches);
    result.stackLog = {
      reloadsAfterReady: log.observed.reloads.filter((at) => at >= readyAt).map((at) => at - T),
      sweeps: log.observed.sweeps.map(({ at, ...sweep }) => ({ ...sweep, atMsFromT: at - T })),
      errorLines: log.observed.errorLines,
      errorExamples: log.observed.errorExamples,
      workerdTailStreamErrors: log.observed.tailStreamErrors,
      apiRequestsLogged: log.observed.apiRequests,
    };
    await readRunsSample(run, T, jobs, expected, delivery);
    // ---- 6. what it cost, as the scheduler's meters counted it
    try {
      result.cost = await readCost(live, t0);
    } catch (err) {
      say(`reading the cost: ${(err as Error).message}`);
    }
    result.harness.ok = true;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    result.harness.error = interrupted ? `interrupted by ${interrupted}` : err instanceof Error ? (err.stack ?? message) : message;
    say(`harness error: ${interrupted ? result.harness.error : message}`);
  } finally {
    await stopStack();
    await log.close();
    await receiver?.close();
    result.environment.loadavgAtEnd = loadavg().map((x) => round(x, 2));
    result.finishedAt = iso(Date.now());
  }

  writeFileSync(jsonPath, `${JSON.stringify(result, null, 2)}\n`);
  console.log(summaryLines(result).join("\n"));
  if (result.cost) console.log(costLines(result.cost).join("\n"));
  console.log(`\nresults: ${relative(ROOT, jsonPath)}\nstack log: ${relative(ROOT, logPath)}`);
  if (opts["keep-state"] && result.startup) console.log(`state kept in ${result.startup.workDir}`);
  if (interrupted) return 130;
  return result.harness.ok ? 0 : 1;
}

let opts: Options | null;
try {
  opts = parseOptions(process.argv.slice(2));
} catch (err) {
  if (!(err instanceof UsageError)) throw err;
  console.error(`${err.message}\n${usage()}`);
  process.exit(2);
}
if (opts === null) {
  console.log(usage());
  process.exit(0);
}
main(opts).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
