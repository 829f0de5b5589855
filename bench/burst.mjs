#!/usr/bin/env node
// The "burst" benchmark: N one-off jobs all due at the same instant T, each calling a loopback
// receiver; measures how late and how completely the runs arrive. The workload is defined in
// bench/README.md. Run it as `npm run bench` (or `npm run bench -- --jobs 1000`): npm puts the
// project's Node 22 first on PATH, and the stack is started with that same Node.
//
// Plain Node ESM, no dependencies. Talks only to 127.0.0.1. Always stops the stack it started.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cpSync, createWriteStream, existsSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const RESULTS_DIR = join(ROOT, "bench", "results");
const HOST = "127.0.0.1";

// ---------------------------------------------------------------- options

const OPTIONS = {
  jobs: { env: "BENCH_JOBS", default: 10_000, help: "N, the number of burst jobs" },
  concurrency: { env: "BENCH_CONCURRENCY", default: 32, help: "create requests in flight" },
  calibration: { env: "BENCH_CALIBRATION", default: 200, help: "jobs created first (due in 7 days) to measure the creation rate" },
  "margin-ms": { env: "BENCH_MARGIN_MS", default: 5_000, help: "added to the estimated end of creation to make T" },
  safety: { env: "BENCH_SAFETY", default: 1.2, help: "factor on the estimated creation time", float: true },
  "timeout-ms": { env: "BENCH_TIMEOUT_MS", default: 300_000, help: "how long after T to wait for receipts" },
  "settle-ms": { env: "BENCH_SETTLE_MS", default: 10_000, help: "extra listening after the last job arrived, for duplicates" },
  sample: { env: "BENCH_SAMPLE", default: 50, help: "jobs whose runs are read back through the runs API" },
  "startup-timeout-ms": { env: "BENCH_STARTUP_TIMEOUT_MS", default: 180_000, help: "how long to wait for /healthz" },
  "tenant-max-in-flight": {
    env: "BENCH_TENANT_MAX_IN_FLIGHT",
    default: 0,
    help: "create the jobs as a tenant with this maxRunsInFlight (0: with the admin token, no limits)",
  },
  "in-place": { env: "BENCH_IN_PLACE", default: false, help: "run the stack from the working tree, not from a snapshot of it", flag: true },
  "keep-state": {
    env: "BENCH_KEEP_STATE",
    default: false,
    help: "keep the temporary dir (D1 + shard state, snapshot) afterwards",
    flag: true,
  },
};

function usage() {
  const lines = Object.entries(OPTIONS).map(
    ([name, o]) => `${`  --${name}${o.flag ? "" : " <n>"}`.padEnd(28)}${o.help} (env ${o.env}, default ${o.default})`,
  );
  return `usage: npm run bench -- [options]\n${lines.join("\n")}`;
}

function parseOptions(argv) {
  const values = {};
  for (const [name, o] of Object.entries(OPTIONS)) {
    const env = process.env[o.env];
    values[name] = env !== undefined && env !== "" ? (o.flag ? env !== "0" && env !== "false" : Number(env)) : o.default;
  }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--help" || arg === "-h") {
      console.log(usage());
      process.exit(0);
    }
    const match = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    const o = match && OPTIONS[match[1]];
    if (!o) throw new UsageError(`unknown argument: ${arg}`);
    if (o.flag) values[match[1]] = match[2] === undefined ? true : match[2] !== "0" && match[2] !== "false";
    else {
      const raw = match[2] ?? argv[++i];
      if (raw === undefined) throw new UsageError(`--${match[1]} needs a value`);
      values[match[1]] = Number(raw);
    }
  }
  for (const [name, o] of Object.entries(OPTIONS)) {
    if (o.flag) continue;
    const v = values[name];
    const ok = o.float ? Number.isFinite(v) && v >= 1 : Number.isInteger(v) && v >= 0;
    if (!ok) throw new UsageError(`--${name}: not a valid value: ${v}`);
  }
  if (values.jobs < 1) throw new UsageError("--jobs must be at least 1");
  if (values.concurrency < 1) throw new UsageError("--concurrency must be at least 1");
  return values;
}

class UsageError extends Error {}

// ---------------------------------------------------------------- small helpers

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const iso = (ms) => new Date(ms).toISOString();
const round = (x, digits = 1) => (x === null || x === undefined || Number.isNaN(x) ? null : Number(x.toFixed(digits)));

/** Nearest-rank percentile of an ascending array; null when empty. */
function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

function summarize(values) {
  const sorted = Float64Array.from(values).sort();
  const n = sorted.length;
  return {
    count: n,
    min: n ? sorted[0] : null,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: n ? sorted[n - 1] : null,
    mean: n ? round(sorted.reduce((a, b) => a + b, 0) / n) : null,
  };
}

async function freePort() {
  const server = createServer();
  await new Promise((resolve, reject) => server.once("error", reject).listen(0, HOST, resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * `wrangler dev` watches the worker's sources and reloads the worker when one changes, which in
 * the middle of a burst restarts the shards and the queue. So by default the stack runs from a
 * snapshot of the files `npm start` uses (node_modules linked, not copied): edits made to the
 * working tree while the bench runs cannot reach it.
 */
function snapshotTree(into) {
  for (const name of ["package.json", "wrangler.toml", "tsconfig.json", "src", "scripts", "migrations"]) {
    if (existsSync(join(ROOT, name))) cpSync(join(ROOT, name), join(into, name), { recursive: true });
  }
  symlinkSync(join(ROOT, "node_modules"), join(into, "node_modules"), "dir");
  return into;
}

function gitState() {
  const git = (...args) => {
    const r = spawnSync("git", args, { cwd: ROOT, encoding: "utf8", timeout: 10_000 });
    return r.status === 0 ? r.stdout.trim() : null;
  };
  const dirty = git("status", "--porcelain", "--", "src", "scripts", "migrations", "wrangler.toml", "package.json");
  return { commit: git("rev-parse", "HEAD"), uncommittedChanges: dirty === null ? null : dirty.split("\n").filter(Boolean) };
}

/** fetch with a timeout that never throws: { status, body, error, ms }. */
async function request(url, init = {}, timeoutMs = 30_000) {
  const started = performance.now();
  try {
    const response = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    const text = await response.text();
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    return { status: response.status, body, error: null, ms: performance.now() - started };
  } catch (err) {
    return { status: null, body: null, error: `${err.name}: ${err.message}`, ms: performance.now() - started };
  }
}

/** Runs `count` tasks with at most `limit` in flight; `task(i)` must not throw. Stops early when `stop()` says so. */
async function pool(count, limit, task, stop = () => false) {
  let next = 0;
  const worker = async () => {
    while (next < count && !stop()) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  return next;
}

// ---------------------------------------------------------------- the receiver

/**
 * Records every request: path /burst/<i> is burst job i, /calibration/<i> a calibration job.
 * The receipt time is taken when the request's headers reach the handler; the answer is 200
 * once the (empty) body has been read.
 */
async function startReceiver() {
  const receipts = []; // { t, kind, index, runId, scheduledAt, attempt, jobId }
  const firstReceipt = new Map(); // burst index -> first receipt time
  const server = createServer((req, res) => {
    const t = Date.now();
    const match = /^\/(burst|calibration)\/(\d+)$/.exec(req.url ?? "");
    receipts.push({
      t,
      kind: match ? match[1] : "unknown",
      index: match ? Number(match[2]) : null,
      path: match ? undefined : req.url,
      runId: req.headers["x-edgecron-run-id"] ?? req.headers["idempotency-key"] ?? null,
      scheduledAt: req.headers["x-edgecron-scheduled-at"] ?? null,
      attempt: req.headers["x-edgecron-attempt"] ?? null,
      jobId: req.headers["x-edgecron-job-id"] ?? null,
    });
    if (match && match[1] === "burst" && !firstReceipt.has(Number(match[2]))) firstReceipt.set(Number(match[2]), t);
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("ok");
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise((resolve, reject) => server.once("error", reject).listen(0, HOST, resolve));
  return { server, receipts, firstReceipt, url: `http://${HOST}:${server.address().port}` };
}

// ---------------------------------------------------------------- the stack

/**
 * Starts `node scripts/start.mjs` (what `npm start` runs) in its own process group, with its
 * output written, time-stamped, to `logPath` and scanned for queue batches, sweeps and errors.
 */
function startStack({ tree, port, persistDir, registryDir, token, logPath, t0 }) {
  const log = createWriteStream(logPath);
  const observed = { queueBatches: [], sweeps: [], reloads: [], errorLines: 0, errorExamples: [], tailStreamErrors: 0, apiRequests: 0 };
  // A private dev registry: otherwise every other `wrangler dev` starting or stopping on this
  // machine makes this one reload its worker (and lose the queue's in-memory messages).
  const env = {
    ...process.env,
    PORT: String(port),
    PERSIST_DIR: persistDir,
    API_TOKEN: token,
    WRANGLER_REGISTRY_PATH: registryDir,
    WRANGLER_SEND_METRICS: "false",
  };
  const child = spawn(process.execPath, [join(tree, "scripts", "start.mjs")], {
    cwd: tree,
    env,
    detached: true, // its own process group: wrangler and workerd are stopped with it
    stdio: ["ignore", "pipe", "pipe"],
  });
  const state = { child, log, observed, exited: null, stopped: false };
  child.on("exit", (code, signal) => {
    state.exited = { code, signal, at: Date.now() };
  });
  child.on("error", (err) => {
    state.exited = { code: null, signal: null, error: err.message, at: Date.now() };
  });

  const ansi = /\x1b\[[0-9;]*[A-Za-z]/g;
  const onLine = (stream, raw) => {
    const now = Date.now();
    const line = raw.replace(ansi, "");
    log.write(`[+${((now - t0) / 1000).toFixed(3)}s ${stream}] ${line}\n`);
    let m;
    if ((m = /QUEUE (\S+) (\d+)\/(\d+)(?: \((\d+)ms\))?/.exec(line))) {
      observed.queueBatches.push({ endedAt: now, acked: Number(m[2]), size: Number(m[3]), ms: m[4] === undefined ? null : Number(m[4]) });
    } else if (line.includes('{"sweep":')) {
      try {
        observed.sweeps.push({ at: now, ...JSON.parse(line.slice(line.indexOf('{"sweep":'))).sweep });
      } catch {
        observed.sweeps.push({ at: now });
      }
    } else if (/trace-stream.*tail session was canceled/.test(line)) {
      observed.tailStreamErrors++; // workerd's local tail/trace plumbing, not the worker's code
    } else if (/Reloading local server/.test(line)) {
      observed.reloads.push(now);
    } else if (/^\[wrangler:info\] (GET|POST|DELETE) \/v1\//.test(line)) {
      observed.apiRequests++;
    } else if (
      /ERROR|Error|error|failed|unreachable|did not confirm|✘/.test(line) &&
      !/Request\.cf|workers\.cloudflare\.com|getaddrinfo|GetAddrInfoReqWrap|update available/.test(line)
    ) {
      observed.errorLines++;
      if (observed.errorExamples.length < 10) observed.errorExamples.push(line.slice(0, 300));
    }
  };
  for (const [name, stream] of [
    ["out", child.stdout],
    ["err", child.stderr],
  ]) {
    let buffered = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk) => {
      buffered += chunk;
      const lines = buffered.split(/\r?\n/);
      buffered = lines.pop();
      for (const line of lines) onLine(name, line);
    });
    stream.on("end", () => buffered && onLine(name, buffered));
  }
  return state;
}

function groupAlive(pid) {
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** SIGTERM to the whole process group, then SIGKILL to whatever is left. Never throws; idempotent. */
function stopStack(stack) {
  if (!stack) return Promise.resolve();
  stack.stopping ??= (async () => {
    stack.stopped = true;
    const pid = stack.child.pid;
    if (pid !== undefined) {
      try {
        process.kill(-pid, "SIGTERM");
      } catch {}
      for (let i = 0; i < 50 && groupAlive(pid); i++) await sleep(100);
      try {
        process.kill(-pid, "SIGKILL"); // also harmless when only zombies are left
      } catch {}
    }
    await new Promise((resolve) => stack.log.end(resolve));
  })();
  return stack.stopping;
}

async function waitUntilReady(base, token, stack, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (stack.exited) throw new Error(`the stack exited during startup: ${JSON.stringify(stack.exited)}`);
    const health = await request(`${base}/healthz`, {}, 2_000);
    if (health.status === 200) {
      // The token is random: a 200 here proves the port is ours, not another stack's.
      const list = await request(`${base}/v1/jobs?limit=1`, { headers: { authorization: `Bearer ${token}` } }, 10_000);
      if (list.status === 200) return;
      throw new Error(`/healthz answered but /v1/jobs gave ${list.status ?? list.error}: is another server on this port?`);
    }
    await sleep(250);
  }
  throw new Error(`no answer from ${base}/healthz within ${timeoutMs} ms`);
}

// ---------------------------------------------------------------- the benchmark

async function main() {
  const opts = parseOptions(process.argv.slice(2));
  const N = opts.jobs;
  const t0 = Date.now();
  const stamp = iso(t0).replace(/[:.]/g, "-");
  mkdirSync(RESULTS_DIR, { recursive: true });
  const logPath = join(RESULTS_DIR, `burst-${stamp}.log`);
  const jsonPath = join(RESULTS_DIR, `burst-${stamp}.json`);
  const say = (msg) => console.log(`[bench +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

  const nodeMajor = Number(process.versions.node.split(".")[0]);
  if (nodeMajor < 22) say(`warning: running on Node ${process.version}; use \`npm run bench\` to get the project's Node 22`);

  const result = {
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
        ["SHARD_COUNT", "CLAIM_TIMEOUT_MS", "SWEEP_INTERVAL_MS"].filter((k) => process.env[k]).map((k) => [k, process.env[k]]),
      ),
    },
    logPath: relative(ROOT, logPath),
    harness: { ok: false, error: null },
  };

  let stack = null;
  let receiver = null;
  let workDir = null; // tree/ (snapshot), state/ (PERSIST_DIR), registry/ (wrangler dev registry)
  let interrupted = null;
  const onSignal = (signal) => {
    if (interrupted) {
      if (stack?.child.pid !== undefined) {
        try {
          process.kill(-stack.child.pid, "SIGKILL");
        } catch {}
      }
      process.exit(130);
    }
    interrupted = signal;
    say(`${signal}: stopping the stack`);
    // The main flow sees the stack gone, stops, and writes what it has. Failing that, leave anyway.
    stopStack(stack);
    setTimeout(() => process.exit(130), 20_000).unref();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  // Last resort if the process dies some other way: never leave wrangler/workerd behind.
  process.on("exit", () => {
    if (stack && !stack.stopped && stack.child.pid !== undefined) {
      try {
        process.kill(-stack.child.pid, "SIGKILL");
      } catch {}
    }
  });

  try {
    // ---- 1. receiver and stack
    receiver = await startReceiver();
    const port = await freePort();
    workDir = await mkdtemp(join(tmpdir(), "edgecron-bench-"));
    const persistDir = join(workDir, "state");
    const registryDir = join(workDir, "registry");
    mkdirSync(persistDir);
    mkdirSync(registryDir);
    result.code = gitState();
    let tree = ROOT;
    if (!opts["in-place"]) {
      tree = join(workDir, "tree");
      mkdirSync(tree);
      snapshotTree(tree);
    }
    result.code.ranFrom = opts["in-place"] ? "working tree" : "snapshot of the working tree";
    result.code.devRegistry = "private (WRANGLER_REGISTRY_PATH in the temporary dir)";
    const token = randomBytes(16).toString("hex");
    const base = `http://${HOST}:${port}`;
    say(`starting the stack on ${base} (log: ${relative(ROOT, logPath)}); receiver on ${receiver.url}`);
    stack = startStack({ tree, port, persistDir, registryDir, token, logPath, t0 });
    const startupStarted = Date.now();
    await waitUntilReady(base, token, stack, opts["startup-timeout-ms"]);
    result.startup = { readyAfterMs: Date.now() - startupStarted, port, workDir };
    say(`stack ready after ${((Date.now() - startupStarted) / 1000).toFixed(1)} s`);

    let headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    const maxInFlight = opts["tenant-max-in-flight"];
    if (maxInFlight > 0) {
      // Flow control on the path: every run of the burst goes through the tenant's gate.
      const limits = { maxJobs: null, requestsPerSecond: null, maxRunsInFlight: maxInFlight };
      const r = await request(`${base}/v1/tenants`, { method: "POST", headers, body: JSON.stringify({ name: "bench", limits }) });
      if (r.status !== 201) throw new Error(`could not create the bench tenant: ${r.status} ${JSON.stringify(r.body) ?? r.error}`);
      headers = { ...headers, authorization: `Bearer ${r.body.apiKey}` };
      result.tenant = { maxRunsInFlight: maxInFlight };
      say(`jobs belong to a tenant with maxRunsInFlight ${maxInFlight}`);
    }
    const stackDied = () => stack.exited !== null;
    const createJob = (at, url) =>
      request(`${base}/v1/jobs`, { method: "POST", headers, body: JSON.stringify({ schedule: { at }, target: { url } }) });

    // ---- 2a. calibration: the creation rate, measured on jobs that will not fire during the run
    const C = opts.calibration;
    let rate;
    if (C > 0) {
      const farAt = iso(Date.now() + 7 * 86_400_000);
      let ok = 0;
      const started = performance.now();
      await pool(
        C,
        opts.concurrency,
        async (i) => {
          const r = await createJob(farAt, `${receiver.url}/calibration/${i}`);
          if (r.status === 201) ok++;
        },
        stackDied,
      );
      const seconds = (performance.now() - started) / 1000;
      if (ok === 0) throw new Error("no calibration job could be created");
      rate = ok / seconds;
      result.calibration = { jobs: C, created: ok, seconds: round(seconds, 3), jobsPerSecond: round(rate) };
      say(`calibration: ${ok}/${C} jobs in ${seconds.toFixed(2)} s = ${rate.toFixed(0)} jobs/s`);
    } else {
      rate = 200; // a guess; --calibration 0 is for debugging only
      result.calibration = { jobs: 0, assumedJobsPerSecond: rate };
    }

    // ---- 2b. choose T
    const chosenAt = Date.now();
    const estimateMs = Math.ceil((N / rate) * 1000);
    const T = chosenAt + Math.ceil(estimateMs * opts.safety) + opts["margin-ms"];
    const Tiso = iso(T);
    result.schedule = {
      T: Tiso,
      TEpochMs: T,
      chosenAt: iso(chosenAt),
      estimatedCreationMs: estimateMs,
      safety: opts.safety,
      marginMs: opts["margin-ms"],
      leadMs: T - chosenAt,
    };
    say(
      `T = ${Tiso} (in ${((T - chosenAt) / 1000).toFixed(1)} s: ${N} jobs at ~${rate.toFixed(0)}/s × ${opts.safety} + ${opts["margin-ms"]} ms)`,
    );

    // ---- 2c. create the N burst jobs
    const jobs = new Array(N).fill(null); // { id, createdAt, ms } or { error }
    const creationDeadline = T + opts["timeout-ms"];
    let created = 0;
    let failed = 0;
    let nextRunMismatch = 0;
    const failures = new Map();
    const creationStarted = Date.now();
    let lastProgress = creationStarted;
    const attempted = await pool(
      N,
      opts.concurrency,
      async (i) => {
        const r = await createJob(Tiso, `${receiver.url}/burst/${i}`);
        const now = Date.now();
        if (r.status === 201 && r.body && typeof r.body.id === "string") {
          jobs[i] = { id: r.body.id, createdAt: now, ms: r.ms };
          created++;
          if (r.body.nextRunAt !== Tiso) nextRunMismatch++;
        } else {
          jobs[i] = { error: r.error ?? `HTTP ${r.status}` };
          failed++;
          const key = r.error ? r.error.split(":")[0] : `HTTP ${r.status} ${JSON.stringify(r.body).slice(0, 120)}`;
          failures.set(key, (failures.get(key) ?? 0) + 1);
        }
        if (now - lastProgress >= 5_000) {
          lastProgress = now;
          say(
            `created ${created}/${N} (${failed} failed), ${((created * 1000) / (now - creationStarted)).toFixed(0)} jobs/s, T ${now < T ? "in" : "passed"} ${(Math.abs(T - now) / 1000).toFixed(1)} s`,
          );
        }
      },
      () => stackDied() || Date.now() > creationDeadline,
    );
    const creationEnded = Date.now();
    const createTimes = jobs.filter((j) => j?.id).map((j) => j.createdAt);
    const createdAfterT = createTimes.filter((t) => t > T).length;
    result.creation = {
      attempted,
      created,
      failed,
      notAttempted: N - attempted,
      failures: Object.fromEntries(failures),
      seconds: round((creationEnded - creationStarted) / 1000, 3),
      jobsPerSecond: round((created * 1000) / Math.max(1, creationEnded - creationStarted)),
      requestMs: summarize(jobs.filter((j) => j?.id).map((j) => round(j.ms))),
      endedAt: iso(creationEnded),
      slackMs: T - creationEnded, // > 0: creation finished before T
      createdAfterT,
      nextRunAtMismatch: nextRunMismatch,
    };
    say(
      `created ${created}/${N} in ${result.creation.seconds} s = ${result.creation.jobsPerSecond} jobs/s (${failed} failed); ` +
        (creationEnded <= T
          ? `finished ${((T - creationEnded) / 1000).toFixed(1)} s before T`
          : `LATE: finished ${((creationEnded - T) / 1000).toFixed(1)} s after T, ${createdAfterT} jobs created after T`),
    );
    if (stackDied()) throw new Error(`the stack exited during creation: ${JSON.stringify(stack.exited)}`);
    if (created === 0) throw new Error("no burst job could be created");

    // ---- 3. wait for the runs
    const expected = new Set(jobs.flatMap((j, i) => (j?.id ? [i] : [])));
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
      if (stackDied()) throw new Error(`the stack exited while runs were due: ${JSON.stringify(stack.exited)}`);
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
      for (const until = Date.now() + opts["settle-ms"]; Date.now() < until && !stackDied(); ) await sleep(100);
    }
    const waitEnded = Date.now();
    result.waitEndedAt = iso(waitEnded);

    // ---- 4. what arrived
    const burst = receiver.receipts.filter((r) => r.kind === "burst");
    const byIndex = new Map();
    for (const r of burst) {
      const list = byIndex.get(r.index) ?? [];
      list.push(r);
      byIndex.set(r.index, list);
    }
    const lagByJob = jobs.map((j, i) => (j?.id && receiver.firstReceipt.has(i) ? receiver.firstReceipt.get(i) - T : null));
    const lags = lagByJob.filter((x) => x !== null);
    const lost = [...expected].filter((i) => !byIndex.has(i));
    const runIdCounts = new Map();
    for (const r of burst) if (r.runId) runIdCounts.set(r.runId, (runIdCounts.get(r.runId) ?? 0) + 1);
    const repeatedRunIds = [...runIdCounts].filter(([, n]) => n > 1);
    const multiRunJobs = [...byIndex].filter(([, list]) => new Set(list.map((r) => r.runId)).size > 1).map(([i]) => i);
    const lagStats = summarize(lags);
    const firsts = lagStats.min;
    const lastFirst = lagStats.max;
    const lastAny = burst.length ? burst.reduce((m, r) => Math.max(m, r.t), -Infinity) - T : null;
    const perSecond = [];
    for (const lag of lags) {
      const s = Math.max(0, Math.floor(lag / 1000));
      perSecond[s] = (perSecond[s] ?? 0) + 1;
    }
    for (let s = 0; s < perSecond.length; s++) perSecond[s] ??= 0;
    const lateCreated = jobs.flatMap((j, i) => (j?.id && j.createdAt > T ? [i] : []));
    result.delivery = {
      expected: expected.size,
      received: lags.length,
      lost: lost.length,
      lostIndexes: lost.slice(0, 100),
      lagMs: lagStats,
      firstArrivalMs: firsts,
      drainMs: lastFirst, // last job's first receipt − T
      lastReceiptMs: lastAny, // any receipt, duplicates included
      drainJobsPerSecond: lags.length > 1 && lastFirst > firsts ? round(((lags.length - 1) * 1000) / (lastFirst - firsts)) : null,
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
        fromJobsWhoseCreationFailed: burst.filter((r) => !expected.has(r.index)).length,
      },
      lateCreatedJobs: lateCreated.length,
      lagMsOfLateCreatedJobs: summarize(lateCreated.flatMap((i) => (lagByJob[i] === null ? [] : [lagByJob[i]]))),
      arrivalsPerSecondAfterT: perSecond,
    };

    // ---- 5. the stack's own view: queue batches and sweeps (from its log), runs API sample
    const inBurst = (at) => at >= T - 1_000 && at <= waitEnded;
    const batches = stack.observed.queueBatches.filter((b) => inBurst(b.endedAt));
    const intervals = batches.filter((b) => b.ms !== null).map((b) => [b.endedAt - b.ms, b.endedAt]);
    let maxOverlap = 0;
    const events = intervals
      .flatMap(([s, e]) => [
        [s, 1],
        [e, -1],
      ])
      .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    for (let open = 0, k = 0; k < events.length; k++) maxOverlap = Math.max(maxOverlap, (open += events[k][1]));
    const busyMs = (() => {
      const sorted = intervals.slice().sort((a, b) => a[0] - b[0]);
      let total = 0;
      let end = -Infinity;
      for (const [s, e] of sorted) {
        if (e <= end) continue;
        total += e - Math.max(s, end);
        end = e;
      }
      return total;
    })();
    result.queue = {
      batchesDuringBurst: batches.length,
      messages: batches.reduce((a, b) => a + b.size, 0),
      acked: batches.reduce((a, b) => a + b.acked, 0),
      batchSize: summarize(batches.map((b) => b.size)),
      batchMs: summarize(batches.filter((b) => b.ms !== null).map((b) => b.ms)),
      maxConcurrentBatches: maxOverlap,
      consumerBusyMs: busyMs,
      firstBatchEndedMs: batches.length ? batches[0].endedAt - T : null,
      lastBatchEndedMs: batches.length ? batches[batches.length - 1].endedAt - T : null,
      batchesOverall: stack.observed.queueBatches.length,
    };
    result.stackLog = {
      reloadsAfterReady: stack.observed.reloads.map((at) => at - T), // ms from T; any reload spoils the run
      sweeps: stack.observed.sweeps.map((s) => ({ ...s, at: undefined, atMsFromT: s.at - T })),
      errorLines: stack.observed.errorLines,
      errorExamples: stack.observed.errorExamples,
      workerdTailStreamErrors: stack.observed.tailStreamErrors,
      apiRequestsLogged: stack.observed.apiRequests,
    };

    const sampleSet = new Set();
    const createdIdx = [...expected];
    const S = Math.min(opts.sample, createdIdx.length);
    for (let k = 0; k < S; k++) sampleSet.add(createdIdx[Math.floor((k * createdIdx.length) / S)]);
    for (const i of [...lost.slice(0, 20), ...multiRunJobs.slice(0, 20)]) sampleSet.add(i);
    const sampleIdx = [...sampleSet];
    const sample = [];
    await pool(
      sampleIdx.length,
      8,
      async (k) => {
        const i = sampleIdx[k];
        const r = await request(`${base}/v1/jobs/${jobs[i].id}/runs?limit=10`, { headers: { authorization: `Bearer ${token}` } }, 10_000);
        sample.push({ i, r });
      },
      stackDied,
    );
    const states = {};
    const claimLag = [];
    const claimToReceipt = [];
    const receiptToReport = [];
    let runsApiErrors = 0;
    for (const { i, r } of sample) {
      if (r.status !== 200 || !Array.isArray(r.body?.items)) {
        runsApiErrors++;
        continue;
      }
      const items = r.body.items;
      const key = items.length === 0 ? "no run" : items.map((x) => `${x.state}/${x.attempts}`).join(",");
      states[key] = (states[key] ?? 0) + 1;
      const run = items[0];
      if (run?.startedAt) {
        const started = Date.parse(run.startedAt);
        claimLag.push(started - T);
        const got = receiver.firstReceipt.get(i);
        if (got !== undefined) claimToReceipt.push(got - started);
        if (got !== undefined && run.finishedAt) receiptToReport.push(Date.parse(run.finishedAt) - got);
      }
    }
    result.runsApiSample = {
      jobs: sample.length,
      errors: runsApiErrors,
      statesAndAttempts: states, // "succeeded/1": one run, succeeded, one attempt
      claimedMsAfterT: summarize(claimLag), // the run's startedAt (its claim by the consumer) − T
      claimToReceiptMs: summarize(claimToReceipt),
      receiptToReportMs: summarize(receiptToReport),
    };
    result.delivery.lagMsByJob = lagByJob; // per burst job index; null: not created or lost
    result.harness.ok = true;
  } catch (err) {
    result.harness.error = interrupted ? `interrupted by ${interrupted}` : err instanceof Error ? (err.stack ?? err.message) : String(err);
    say(`harness error: ${interrupted ? result.harness.error : err instanceof Error ? err.message : err}`);
  } finally {
    await stopStack(stack);
    receiver?.server.closeAllConnections?.();
    await new Promise((resolve) => (receiver ? receiver.server.close(resolve) : resolve()));
    // rm unlinks the tree's node_modules symlink; it never follows it.
    if (workDir && !opts["keep-state"]) await rm(workDir, { recursive: true, force: true }).catch(() => {});
    result.environment.loadavgAtEnd = loadavg().map((x) => round(x, 2));
    result.finishedAt = iso(Date.now());
  }

  writeFileSync(jsonPath, `${JSON.stringify(result, null, 2)}\n`);
  printSummary(result);
  console.log(`\nresults: ${relative(ROOT, jsonPath)}\nstack log: ${relative(ROOT, logPath)}`);
  if (opts["keep-state"] && result.startup) console.log(`state kept in ${result.startup.workDir}`);
  return interrupted ? 130 : result.harness.ok ? 0 : 1;
}

function printSummary(r) {
  const ms = (x) => (x === null || x === undefined ? "-" : `${Math.round(x)} ms`);
  const out = [];
  out.push("", `burst: ${r.options.jobs} one-off jobs due at one instant T = ${r.schedule?.T ?? "-"}`);
  if (r.calibration)
    out.push(
      `  calibration     ${r.calibration.created ?? 0} jobs, ${r.calibration.jobsPerSecond ?? r.calibration.assumedJobsPerSecond} jobs/s`,
    );
  if (r.creation) {
    const c = r.creation;
    out.push(
      `  creation        ${c.created} created, ${c.failed} failed, ${c.notAttempted} not attempted; ${c.jobsPerSecond} jobs/s over ${c.seconds} s (${r.options.concurrency} in flight)`,
    );
    out.push(`  create request  p50 ${ms(c.requestMs.p50)}  p99 ${ms(c.requestMs.p99)}  max ${ms(c.requestMs.max)}`);
    out.push(
      `  T vs creation   ${c.slackMs >= 0 ? `creation ended ${ms(c.slackMs)} before T` : `LATE: creation ended ${ms(-c.slackMs)} after T; ${c.createdAfterT} jobs created after T`}`,
    );
  }
  if (r.delivery) {
    const d = r.delivery;
    out.push(
      `  fire lag        p50 ${ms(d.lagMs.p50)}  p90 ${ms(d.lagMs.p90)}  p99 ${ms(d.lagMs.p99)}  max ${ms(d.lagMs.max)}  (min ${ms(d.lagMs.min)}, mean ${ms(d.lagMs.mean)})`,
    );
    out.push(`  first arrival   T+${ms(d.firstArrivalMs)}`);
    out.push(
      `  drain           ${ms(d.drainMs)} (last job's first receipt − T); ${d.drainJobsPerSecond ?? "-"} jobs/s between first and last`,
    );
    out.push(`  received        ${d.received}/${d.expected}   lost ${d.lost}`);
    out.push(
      `  duplicates      ${d.duplicates.extraReceipts} extra receipts; ${d.duplicates.runIdsReceivedMoreThanOnce} run ids received more than once; ${d.duplicates.jobsWithMoreThanOneRunId} jobs with more than one run id; ${d.duplicates.receiptsWithAttemptAbove1} receipts with attempt > 1`,
    );
    const oddities = [
      d.earlyFires && `${d.earlyFires} arrived before T`,
      d.scheduledAtHeaderMismatch && `${d.scheduledAtHeaderMismatch} with a scheduled-at header ≠ T`,
      d.unexpected.calibrationFires && `${d.unexpected.calibrationFires} calibration jobs fired`,
      d.unexpected.unknownPaths && `${d.unexpected.unknownPaths} unknown requests`,
      d.unexpected.fromJobsWhoseCreationFailed && `${d.unexpected.fromJobsWhoseCreationFailed} from jobs whose creation failed`,
    ].filter(Boolean);
    if (oddities.length) out.push(`  oddities        ${oddities.join("; ")}`);
    const ps = d.arrivalsPerSecondAfterT;
    if (ps.length) out.push(`  arrivals/s      ${ps.slice(0, 40).join(" ")}${ps.length > 40 ? " …" : ""}`);
  }
  if (r.queue) {
    const q = r.queue;
    out.push(
      `  queue batches   ${q.batchesDuringBurst} batches, ${q.messages} messages; size p50 ${q.batchSize.p50 ?? "-"}; batch time p50 ${ms(q.batchMs.p50)} max ${ms(q.batchMs.max)}; max ${q.maxConcurrentBatches} at once; consumer busy ${ms(q.consumerBusyMs)}`,
    );
  }
  if (r.runsApiSample) {
    const s = r.runsApiSample;
    out.push(
      `  runs API sample ${s.jobs} jobs: ${
        Object.entries(s.statesAndAttempts)
          .map(([k, v]) => `${v}× ${k}`)
          .join(", ") || "-"
      }${s.errors ? `; ${s.errors} errors` : ""}`,
    );
    out.push(
      `                  claimed T+ p50 ${ms(s.claimedMsAfterT.p50)} max ${ms(s.claimedMsAfterT.max)}; claim→receipt p50 ${ms(s.claimToReceiptMs.p50)} max ${ms(s.claimToReceiptMs.max)}`,
    );
  }
  if (r.stackLog) {
    const sweeps = r.stackLog.sweeps.map((s) => `T${s.atMsFromT >= 0 ? "+" : ""}${(s.atMsFromT / 1000).toFixed(1)}s`);
    out.push(
      `  stack log       ${r.stackLog.errorLines} error lines${r.stackLog.workerdTailStreamErrors ? ` (+${r.stackLog.workerdTailStreamErrors} workerd tail-stream errors)` : ""}; sweeps at ${sweeps.join(", ") || "-"}`,
    );
    if (r.stackLog.reloadsAfterReady.length) {
      out.push(
        `  WARNING         wrangler reloaded the worker ${r.stackLog.reloadsAfterReady.length}× (at T${r.stackLog.reloadsAfterReady.map((x) => `${x >= 0 ? "+" : ""}${(x / 1000).toFixed(1)}s`).join(", ")}): a source file changed; this run is not representative`,
      );
    }
  }
  const e = r.environment;
  out.push(
    `  machine         ${e.cpus} CPUs, Node ${e.node}, load average ${e.loadavgAtStart[0]} at start, ${e.loadavgAtEnd?.[0] ?? "-"} at end${e.loadavgAtEnd?.[0] > e.cpus ? " (busy machine: expect noisy figures)" : ""}`,
  );
  if (!r.harness.ok) out.push(`  HARNESS ERROR   ${String(r.harness.error).split("\n")[0]}`);
  console.log(out.join("\n"));
}

main().then(
  (code) => process.exit(code),
  (err) => {
    if (err instanceof UsageError) {
      console.error(`${err.message}\n${usage()}`);
      process.exit(2);
    }
    console.error(err);
    process.exit(1);
  },
);
