// `npm run bench`: the workloads of bench/README.md (burst, steady) on edgecron, on BullMQ +
// Redis (`--peer bullmq`; without persistence and with the AOF fsynced every second, each in
// turn, unless `--redis-aof` picks one), or on all of them one after the other (`--peer both`),
// printed side by side. Run it through npm (`npm run bench -- --workload steady --peer both`): npm puts the
// project's Node 22 first on PATH, which runs this TypeScript as is (type stripping) and
// starts the stack and the BullMQ workers with that same Node.
//
// Talks only to 127.0.0.1. Stops what it started (the stack; redis-server and the BullMQ
// workers) on success, failure and Ctrl-C; a second Ctrl-C leaves at once and SIGKILLs them.
import { mkdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { runBullmq } from "./bullmq.ts";
import { costLines } from "./cost.ts";
import { runEdgecron } from "./edgecron.ts";
import { iso, ROOT, type SystemContext } from "./harness.ts";
import { type Options, parseOptions, systemsOf, UsageError, usage } from "./options.ts";
import { findRedisServer, REDIS_INSTALL } from "./redis.ts";
import { comparisonLines, summaryLines } from "./report.ts";
import type { Result } from "./result.ts";

const RESULTS_DIR = join(ROOT, "bench", "results");

async function main(opts: Options): Promise<number> {
  const t0 = Date.now();
  const stamp = iso(t0).replace(/[:.]/g, "-");
  const systems = systemsOf(opts);
  if (systems.some((s) => s !== "edgecron") && findRedisServer() === null) {
    console.error(`redis-server is not installed (the BullMQ peer runs its own). Install it:\n  ${REDIS_INSTALL}`);
    return 2;
  }
  mkdirSync(RESULTS_DIR, { recursive: true });
  const say = (msg: string) => console.log(`[bench +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
  const nodeMajor = Number(process.versions.node.split(".")[0]);
  if (nodeMajor < 22) say(`warning: running on Node ${process.version}; use \`npm run bench\` to get the project's Node 22`);

  const interrupt = new AbortController();
  const stops = new Set<() => Promise<void>>();
  let interrupted: NodeJS.Signals | null = null;
  const onSignal = (signal: NodeJS.Signals) => {
    // A second signal: leave now; the exit hooks SIGKILL the stack's group, redis and the workers.
    if (interrupted) process.exit(130);
    interrupted = signal;
    say(`${signal}: stopping what the bench started`);
    // The main flow sees its system gone (or its start aborted), stops, and writes what it has.
    // Failing that, leave anyway.
    interrupt.abort();
    for (const stop of stops) void stop().catch((err: Error) => say(`stopping: ${err.message}`));
    setTimeout(() => process.exit(130), 20_000).unref();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  const results: Result[] = [];
  for (const system of systems) {
    if (interrupt.signal.aborted) break;
    const pathBase = join(RESULTS_DIR, `${opts.workload}-${system}-${stamp}`);
    const ctx: SystemContext = {
      opts,
      t0,
      say,
      pathBase,
      interrupt: interrupt.signal,
      onInterrupt(stop) {
        stops.add(stop);
        return () => stops.delete(stop);
      },
    };
    const result = system === "edgecron" ? await runEdgecron(ctx) : await runBullmq(ctx, system === "bullmq-aof" ? "everysec" : null);
    writeFileSync(`${pathBase}.json`, `${JSON.stringify(result, null, 2)}\n`);
    results.push(result);
    console.log(summaryLines(result).join("\n"));
    if (result.cost) console.log(costLines(result.cost).join("\n"));
    console.log(`\nresults: ${relative(ROOT, `${pathBase}.json`)}\nlog: ${result.logPath}`);
    if (opts["keep-state"] && result.startup) console.log(`state kept in ${result.startup.workDir}`);
  }
  if (results.length > 1) console.log(comparisonLines(results).join("\n"));
  if (interrupted) return 130;
  return results.every((r) => r.harness.ok) ? 0 : 1;
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
