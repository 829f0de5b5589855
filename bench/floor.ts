// `npm run bench:floor`: the floor of `npm run bench`'s workloads on this machine. The dispatches
// go through edgecron's platform path alone (bench/floor/worker.ts: alarms → sendBatch of packs →
// the two local queues → bench/floor/runner.ts: one HTTP call each, six at a time per invocation)
// to the bench's own receiver, with none of edgecron's bookkeeping. Lag is measured as `npm run
// bench` measures it (first receipt minus the instant due), with the CPU of every process per
// call over the same window. What edgecron adds is the difference: no code in this shape can
// beat these figures on this stack (bench/README.md).
//
// Like the bench, each run starts a fresh stack in edgecron's default topology (the consumer in
// a second `wrangler dev`, as `npm start` runs edgecron's runner), warms it up with the bench's
// warm-up (W dispatches fired and received), then measures; the figures are the median of the
// runs (3 by default).
//
//   npm run bench:floor                          # burst: 10,000 dispatches due at one instant
//   npm run bench:floor -- --per-message 1       # one dispatch per message, as before packing
//   npm run bench:floor -- --workload steady     # 1,000 dispatches due every second for 30 s
//   npm run bench:floor -- --connections 100     # the platform's six per invocation lifted
//   npm run bench:floor -- --topology one        # both Workers in one wrangler dev
//
// Talks only to 127.0.0.1; stops its `wrangler dev` processes (each in a process group of its
// own) on every exit.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { runnerRegistered } from "../scripts/dev-topology.ts";
import { MAX_OPEN_CONNECTIONS } from "../src/consumer/connections.ts";
import { freePort } from "../test/support/local-stack.ts";
import { cpuFigures, cpuWindow, iso, ROOT, sleep } from "./harness.ts";
import { median } from "./median.ts";
import type { Group } from "./process-cpu.ts";
import { type Receiver, startReceiver } from "./receiver.ts";
import { type LagOrMissed, MISSED, type Summary, type SummaryWithMissed, summarize, summarizeWithMissed } from "./stats.ts";
import { analyseSteady, pairCounter } from "./steady.ts";

const TICKERS_CONFIG = "bench/floor/wrangler.toml";
const RUNNER_CONFIG = "bench/floor/runner.toml";
/** bench/floor/runner.toml's `name`: its file in the dev registry is named so. */
const RUNNER_NAME = "edgecron-floor-runner";

const { values } = parseArgs({
  options: {
    workload: { type: "string", default: "burst" },
    jobs: { type: "string", default: "10000" },
    schedules: { type: "string", default: "1000" },
    "duration-s": { type: "string", default: "30" },
    "per-message": { type: "string", default: "10" },
    tickers: { type: "string", default: "16" },
    connections: { type: "string", default: String(MAX_OPEN_CONNECTIONS) },
    "lead-ms": { type: "string", default: "3000" },
    topology: { type: "string", default: "two" },
    runs: { type: "string", default: "3" },
    warmup: { type: "string", default: "200" },
  },
});
const steady = values.workload === "steady";
if (!steady && values.workload !== "burst") {
  console.error("--workload must be burst or steady");
  process.exit(2);
}
if (values.topology !== "two" && values.topology !== "one") {
  console.error("--topology must be two or one");
  process.exit(2);
}
const topology = values.topology;
const n = Number(steady ? values.schedules : values.jobs);
const seconds = steady ? Number(values["duration-s"]) : 1;
const perMessage = Number(values["per-message"]);
const tickers = Number(values.tickers);
const connections = Number(values.connections);
const leadMs = Number(values["lead-ms"]);
const runs = Number(values.runs);
const warmup = Number(values.warmup);
for (const [name, v] of Object.entries({
  jobs: n,
  "duration-s": seconds,
  "per-message": perMessage,
  tickers,
  connections,
  "lead-ms": leadMs,
  runs,
})) {
  if (!Number.isSafeInteger(v) || v < 1) {
    console.error(`--${name} must be a positive integer`);
    process.exit(2);
  }
}
if (!Number.isSafeInteger(warmup) || warmup < 0) {
  console.error("--warmup must be a whole number");
  process.exit(2);
}

const t0 = Date.now();
const say = (msg: string) => console.log(`[floor +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

/** The processes of one run: each `wrangler dev` in its own group, SIGKILLed if this process exits first. */
const live = new Set<ChildProcess>();
const killGroup = (child: ChildProcess, signal: NodeJS.Signals) => {
  try {
    if (child.pid) process.kill(-child.pid, signal);
  } catch {}
};
process.on("exit", () => {
  for (const child of live) killGroup(child, "SIGKILL");
});
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => process.exit(130));

interface FloorStack {
  base: string;
  groups: Group[];
  stop(): Promise<void>;
}

async function startStack(): Promise<FloorStack> {
  const state = mkdtempSync(join(tmpdir(), "edgecron-floor-"));
  const registry = join(state, "registry");
  const wrangler = join(ROOT, "node_modules", "wrangler", "bin", "wrangler.js");
  const children: ChildProcess[] = [];
  const dev = async (configs: string[], port: number) => {
    const args = ["dev", ...configs.flatMap((c) => ["-c", c]), "--ip", "127.0.0.1", "--port", String(port)];
    args.push("--inspector-port", String(await freePort()), "--persist-to", state, "--show-interactive-dev-session=false");
    const child = spawn(process.execPath, [wrangler, ...args], {
      cwd: ROOT,
      detached: true,
      stdio: ["ignore", "ignore", "inherit"],
      env: { ...process.env, WRANGLER_REGISTRY_PATH: registry },
    });
    live.add(child);
    children.push(child);
    return child;
  };
  const stop = async () => {
    for (const child of children) killGroup(child, "SIGTERM");
    const exited = (child: ChildProcess) =>
      child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => child.once("exit", () => r()));
    await Promise.race([Promise.all(children.map(exited)), sleep(5_000)]);
    for (const child of children) {
      killGroup(child, "SIGKILL");
      live.delete(child);
    }
    rmSync(state, { recursive: true, force: true });
  };
  const port = await freePort();
  if (topology === "two") {
    // The runner first, the tickers once it is registered, as scripts/start.mjs starts edgecron's.
    await dev([RUNNER_CONFIG], await freePort());
    for (let waited = 0; !runnerRegistered(registry, RUNNER_NAME); waited += 100) {
      if (waited > 120_000) {
        await stop();
        throw new Error("the floor runner did not register within 2 minutes");
      }
      await sleep(100);
    }
    await dev([TICKERS_CONFIG], port);
  } else {
    await dev([TICKERS_CONFIG, RUNNER_CONFIG], port);
  }
  const base = `http://127.0.0.1:${port}`;
  for (let tries = 0; ; tries++) {
    const up = await fetch(base).then(
      (r) => r.ok,
      () => false,
    );
    if (up) break;
    if (tries > 1200) {
      await stop();
      throw new Error("wrangler dev did not answer within 2 minutes");
    }
    await sleep(100);
  }
  return { base, groups: children.map((c) => ({ pgid: c.pid! })), stop };
}

interface Plan {
  n: number;
  at: number;
  everyMs: number | null;
  until: number;
  kind: "burst" | "steady" | "warmup";
}

async function start(base: string, receiver: Receiver, plan: Plan) {
  const body = { tickers, url: receiver.url, perMessage, connections, ...plan };
  const started = await fetch(`${base}/start`, { method: "POST", body: JSON.stringify(body) });
  if (!started.ok) throw new Error(`start: ${started.status} ${await started.text()}`);
}

interface RunFigures {
  lagMs: Summary;
  lagMsWithMissed: SummaryWithMissed;
  firstArrivalMs: number | null;
  drainCallsPerSecond: number | null;
  received: number;
  expected: number;
  extraReceipts: number;
  warmupReceived: number;
  cpu: ReturnType<typeof cpuFigures>;
}

async function oneRun(k: number): Promise<RunFigures> {
  const receiver = await startReceiver("127.0.0.1");
  const stack = await startStack();
  try {
    say(`run ${k}: floor probe up on ${stack.base} (topology ${topology}); receiver on ${receiver.url}`);
    // The bench's warm-up: W one-off dispatches a second away, fired and received before T.
    let warmupReceived = 0;
    if (warmup > 0) {
      const at = Date.now() + 1_000;
      await start(stack.base, receiver, { n: warmup, at, everyMs: null, until: at + 1_000, kind: "warmup" });
      const arrived = () => new Set(receiver.receipts.filter((r) => r.kind === "warmup").map((r) => r.index)).size;
      const deadline = at + 60_000;
      while (arrived() < warmup && Date.now() < deadline) await sleep(50);
      warmupReceived = arrived();
    }
    // A steady run's seconds are whole seconds, as cron's are.
    const T = steady ? Math.ceil((Date.now() + leadMs) / 1000) * 1000 : Date.now() + leadMs;
    await start(stack.base, receiver, {
      n,
      at: T,
      everyMs: steady ? 1000 : null,
      until: T + seconds * 1000,
      kind: steady ? "steady" : "burst",
    });
    const cpu = cpuWindow(T, stack.groups, 0);
    const window = { T, seconds };
    const all = new Set(Array.from({ length: n }, (_, i) => i));
    const received = steady ? pairCounter(all, window) : () => receiver.firstReceipt.size;
    const deadline = T + seconds * 1000 + 120_000;
    while (received(receiver.receipts) < n * seconds && Date.now() < deadline) await sleep(50);
    const cpuFigured = cpuFigures(receiver, T, cpu.from, await cpu.before, cpu.end(receiver, received(receiver.receipts) >= n * seconds));
    if (steady) {
      const f = analyseSteady(receiver.receipts, all, window);
      return {
        lagMs: f.lagMs,
        lagMsWithMissed: f.lagMsWithMissed,
        firstArrivalMs: f.lagMs.min,
        drainCallsPerSecond: null,
        received: f.receivedPairs,
        expected: f.expectedPairs,
        extraReceipts: f.extraReceipts,
        warmupReceived,
        cpu: cpuFigured,
      };
    }
    const lags = [...receiver.firstReceipt.values()].map((t) => t - T);
    const lag = summarize(lags);
    const drain =
      lag.count > 1 && lag.max !== null && lag.min !== null && lag.max > lag.min ? ((lag.count - 1) * 1000) / (lag.max - lag.min) : null;
    return {
      lagMs: lag,
      lagMsWithMissed: summarizeWithMissed(lags, n - lag.count),
      firstArrivalMs: lag.min,
      drainCallsPerSecond: drain === null ? null : Math.round(drain),
      received: lag.count,
      expected: n,
      extraReceipts: receiver.receipts.filter((r) => r.kind === "burst").length - lag.count,
      warmupReceived,
      cpu: cpuFigured,
    };
  } finally {
    await stack.stop();
    await receiver.close();
  }
}

const s = (ms: LagOrMissed | null | undefined) =>
  ms === null || ms === undefined ? "—" : ms === MISSED ? "∞ (missed)" : `${(ms / 1000).toFixed(2)} s`;
const cpuText = (c: RunFigures["cpu"]) =>
  c?.allMsPerRun
    ? `${(c.allMsPerRun.user + c.allMsPerRun.system).toFixed(3)} ms per call, every process (workerd ${c.workerdMsPerRun ? (c.workerdMsPerRun.user + c.workerdMsPerRun.system).toFixed(3) : "-"})`
    : "not read (no /proc)";
const runLine = (f: RunFigures) =>
  `p50 ${s(f.lagMs.p50)}  p90 ${s(f.lagMs.p90)}  p99 ${s(f.lagMs.p99)}  max ${s(f.lagMs.max)}; first ${s(f.firstArrivalMs)}; ${steady ? "" : `${f.drainCallsPerSecond ?? "-"} calls/s; `}received ${f.received}/${f.expected} (missed ${f.expected - f.received}, p99 with them ∞ ${s(f.lagMsWithMissed.p99)}); CPU ${cpuText(f.cpu)}; warm-up ${f.warmupReceived}/${warmup}`;

const figures: RunFigures[] = [];
for (let k = 1; k <= runs; k++) {
  const f = await oneRun(k);
  figures.push(f);
  say(`run ${k}: ${runLine(f)}`);
}

const med = (get: (f: RunFigures) => number | null | undefined) => median(figures.map(get));
const cpuAll = (f: RunFigures) => (f.cpu?.allMsPerRun ? f.cpu.allMsPerRun.user + f.cpu.allMsPerRun.system : null);
const cpuWorkerd = (f: RunFigures) => (f.cpu?.workerdMsPerRun ? f.cpu.workerdMsPerRun.user + f.cpu.workerdMsPerRun.system : null);
const medians = {
  p50: med((f) => f.lagMs.p50),
  p90: med((f) => f.lagMs.p90),
  p99: med((f) => f.lagMs.p99),
  max: med((f) => f.lagMs.max),
  firstArrivalMs: med((f) => f.firstArrivalMs),
  drainCallsPerSecond: med((f) => f.drainCallsPerSecond),
  missed: med((f) => f.expected - f.received),
  cpuMsPerCall: med(cpuAll),
  workerdMsPerCall: med(cpuWorkerd),
};
const what = steady ? `${n} dispatches due every second for ${seconds} s` : `${n} dispatches due at one instant`;
const lines = [
  `floor, ${values.workload}: ${what}, ${perMessage} to a message, ${tickers} tickers, 2 queues of batches of 10 messages, ${connections} connections per invocation, topology ${topology}; median of ${runs} runs, each on a fresh stack after a warm-up of ${warmup}`,
  `  fire lag      p50 ${s(medians.p50)}  p90 ${s(medians.p90)}  p99 ${s(medians.p99)}  max ${s(medians.max)}`,
  `  first arrival T+${s(medians.firstArrivalMs)}${steady ? "" : `; drain ${medians.drainCallsPerSecond ?? "-"} calls/s between first and last`}`,
  `  missed        ${medians.missed ?? "-"} (median); each run's p99 with its missed as ∞: ${figures.map((f) => s(f.lagMsWithMissed.p99)).join(", ")}`,
  `  CPU           ${medians.cpuMsPerCall?.toFixed(3) ?? "-"} ms per call, every process (workerd ${medians.workerdMsPerCall?.toFixed(3) ?? "-"}), T − 0.5 s → all received`,
];
console.log(lines.join("\n"));
const dir = join(ROOT, "bench", "results");
mkdirSync(dir, { recursive: true });
const path = join(dir, `floor-${values.workload}-${iso(t0).replace(/[:.]/g, "-")}.json`);
writeFileSync(path, `${JSON.stringify({ options: values, topology, medians, runs: figures }, null, 2)}\n`);
console.log(`results: ${relative(ROOT, path)}`);
process.exit(figures.every((f) => f.received === f.expected) ? 0 : 1);
