// `npm run bench:floor`: the floor of `npm run bench`'s workloads on this machine. The dispatches
// go through edgecron's platform path alone (bench/floor/worker.ts: alarms → sendBatch of packs →
// the two local queues → one HTTP call each, six at a time per invocation) to the bench's own
// receiver, with none of edgecron's bookkeeping. Lag is measured as `npm run bench` measures it
// (first receipt minus the instant due), with workerd's CPU per call. What edgecron adds is the
// difference: no code in this shape can beat these figures on this stack (bench/README.md).
//
//   npm run bench:floor                          # burst: 10,000 dispatches due at one instant
//   npm run bench:floor -- --per-message 1       # one dispatch per message, as before packing
//   npm run bench:floor -- --workload steady     # 1,000 dispatches due every second for 30 s
//   npm run bench:floor -- --connections 100     # the platform's six per invocation lifted
//
// Talks only to 127.0.0.1; stops its `wrangler dev` (a process group of its own) on every exit.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { MAX_OPEN_CONNECTIONS } from "../src/consumer/connections.ts";
import { freePort } from "../test/support/local-stack.ts";
import { ROOT } from "./harness.ts";
import { cpuBetween, groupCpu, workerdTotal } from "./process-cpu.ts";
import { startReceiver } from "./receiver.ts";
import { summarize } from "./stats.ts";
import { analyseSteady, pairCounter } from "./steady.ts";

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
  },
});
const steady = values.workload === "steady";
if (!steady && values.workload !== "burst") {
  console.error("--workload must be burst or steady");
  process.exit(2);
}
const n = Number(steady ? values.schedules : values.jobs);
const seconds = steady ? Number(values["duration-s"]) : 1;
const perMessage = Number(values["per-message"]);
const tickers = Number(values.tickers);
const connections = Number(values.connections);
const leadMs = Number(values["lead-ms"]);
for (const [name, v] of Object.entries({
  jobs: n,
  "duration-s": seconds,
  "per-message": perMessage,
  tickers,
  connections,
  "lead-ms": leadMs,
})) {
  if (!Number.isSafeInteger(v) || v < 1) {
    console.error(`--${name} must be a positive integer`);
    process.exit(2);
  }
}

const t0 = Date.now();
const say = (msg: string) => console.log(`[floor +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
const receiver = await startReceiver("127.0.0.1");
const state = mkdtempSync(join(tmpdir(), "edgecron-floor-"));
const port = await freePort();
const wrangler = join(ROOT, "node_modules", "wrangler", "bin", "wrangler.js");
const args = ["dev", "-c", "bench/floor/wrangler.toml", "--ip", "127.0.0.1", "--port", String(port)];
args.push("--inspector-port", String(await freePort()), "--persist-to", state, "--show-interactive-dev-session=false");
const dev = spawn(process.execPath, [wrangler, ...args], {
  cwd: ROOT,
  detached: true,
  stdio: ["ignore", "ignore", "inherit"],
  env: { ...process.env, WRANGLER_REGISTRY_PATH: join(state, "registry") },
});
const pgid = dev.pid!;
const stop = () => {
  try {
    process.kill(-pgid, "SIGKILL");
  } catch {}
};
process.on("exit", () => {
  stop();
  rmSync(state, { recursive: true, force: true });
});
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => process.exit(130));

const base = `http://127.0.0.1:${port}`;
for (let tries = 0; ; tries++) {
  const up = await fetch(base).then(
    (r) => r.ok,
    () => false,
  );
  if (up) break;
  if (tries > 600) throw new Error("wrangler dev did not answer within 60 s");
  await new Promise((r) => setTimeout(r, 100));
}
say(`floor probe up on ${base}; receiver on ${receiver.url}`);

// A steady run's seconds are whole seconds, as cron's are.
const at = steady ? Math.ceil((Date.now() + leadMs) / 1000) * 1000 : Date.now() + leadMs;
const plan = {
  n,
  tickers,
  at,
  everyMs: steady ? 1000 : null,
  until: at + seconds * 1000,
  kind: steady ? "steady" : "burst",
  url: receiver.url,
  perMessage,
  connections,
};
const started = await fetch(`${base}/start`, { method: "POST", body: JSON.stringify(plan) });
if (!started.ok) throw new Error(`start: ${started.status} ${await started.text()}`);
const cpuBefore = groupCpu(pgid);
const window = { T: at, seconds };
const all = new Set(Array.from({ length: n }, (_, i) => i));
const received = steady ? pairCounter(all, window) : () => receiver.firstReceipt.size;
const deadline = at + seconds * 1000 + 120_000;
while (received(receiver.receipts) < n * seconds && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
const cpuAfter = groupCpu(pgid);
const workerd = cpuBefore && cpuAfter ? workerdTotal(cpuBetween(cpuBefore, cpuAfter)) : null;
const calls = received(receiver.receipts);
const s = (ms: number | null) => (ms === null ? "—" : `${(ms / 1000).toFixed(2)} s`);
const lagLine = (lag: ReturnType<typeof summarize>) =>
  `  fire lag      p50 ${s(lag.p50)}  p90 ${s(lag.p90)}  p99 ${s(lag.p99)}  max ${s(lag.max)}`;
const lines = [
  `floor, ${values.workload}: ${steady ? `${n} dispatches due every second for ${seconds} s` : `${n} dispatches due at one instant`}, ${perMessage} to a message, ${tickers} tickers, 2 queues of batches of 10 messages, ${connections} connections per invocation`,
];
if (steady) {
  const figures = analyseSteady(receiver.receipts, all, window);
  lines.push(
    lagLine(figures.lagMs),
    `  received      ${figures.receivedPairs}/${figures.expectedPairs} (schedule, second) pairs, ${figures.missed} missed`,
  );
} else {
  const lag = summarize([...receiver.firstReceipt.values()].map((t) => t - at));
  const drain = (lag.count / Math.max(1, (lag.max ?? 0) - (lag.min ?? 0))) * 1000;
  lines.push(lagLine(lag), `  first arrival T+${s(lag.min)}`, `  drain         ${drain.toFixed(0)} calls/s between first and last`);
  lines.push(`  received      ${lag.count}/${n}, ${receiver.receipts.length - lag.count} extra receipts`);
}
const cpuMs = workerd ? workerd.user + workerd.system : null;
lines.push(
  cpuMs === null
    ? "  CPU           not read (no /proc)"
    : `  CPU           workerd ${(cpuMs / Math.max(1, calls)).toFixed(2)} ms per call (user ${workerd!.user} ms, system ${workerd!.system} ms)`,
);
console.log(lines.join("\n"));
await receiver.close();
process.exit(calls === n * seconds ? 0 : 1);
