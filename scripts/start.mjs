#!/usr/bin/env node
// `npm start`: applies the local D1 migrations, runs the runner Worker's `wrangler dev` and,
// once the dev registry lists it, the scheduler's (EDGECRON_TOPOLOGY=one: both in one; see
// scripts/dev-topology.ts), prints the URL and the API token, and fires the cron trigger on its
// schedule, which `wrangler dev` does not do by itself: without it the reconciliation sweep
// would never run locally.
//
// wrangler's own output goes to a log file; the console gets a summary once the API answers,
// one line per sweep and the errors (scripts/dev-output.ts). `npm start -- --verbose` or
// EDGECRON_VERBOSE=1 passes wrangler's output through instead, as the tests and the bench need.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, isAbsolute, join, relative } from "node:path";
import { clock, eachLine, lastLines, logLine, openLog, quietConsole, sweepLine } from "./dev-output.ts";
import { processConfigs, RUNNER_NAME, runnerRegistered, SCHEDULER_NAME, topologyOf } from "./dev-topology.ts";

const port = Number(process.env.PORT ?? 8787);
const token = process.env.API_TOKEN ?? "dev-admin-token-for-local-use-only";
const persistTo = process.env.PERSIST_DIR; // default: wrangler's own .wrangler/state
const sweepEveryMs = Number(process.env.SWEEP_INTERVAL_MS ?? 60_000); // the cron trigger is "* * * * *"
// EDGECRON_TOPOLOGY: "two" (the default) runs the runner Worker as a second `wrangler dev`,
// "one" runs both Workers in one (scripts/dev-topology.ts).
let topology;
try {
  topology = topologyOf(process.env.EDGECRON_TOPOLOGY);
} catch (err) {
  console.error(`[edgecron] ${err.message}`);
  process.exit(2);
}
const verbose = process.argv.includes("--verbose") || process.env.EDGECRON_VERBOSE === "1";
const base = `http://127.0.0.1:${port}`;
const wrangler = new URL("../node_modules/wrangler/bin/wrangler.js", import.meta.url).pathname;
const root = new URL("..", import.meta.url).pathname;
const statePath = persistTo ?? new URL("../.wrangler/state", import.meta.url).pathname;
// Beside the state it tells about, like the local secrets.
const logPath = persistTo
  ? join(persistTo, "logs", "edgecron-dev.log")
  : new URL("../.wrangler/logs/edgecron-dev.log", import.meta.url).pathname;
const log = verbose ? null : openLog(logPath);
const TAIL_LINES = 40;
// A private dev registry: with the shared default, every other `wrangler dev` on the machine
// starting or stopping reloads this one, and a reload drops the local queue's messages.
const registry = process.env.WRANGLER_REGISTRY_PATH ?? new URL(`../.wrangler/registry-${port}`, import.meta.url).pathname;

/** A path as the developer would type it: relative to the current directory when inside it. */
function shown(path) {
  const rel = relative(process.cwd(), path);
  return rel && !rel.startsWith("..") && !isAbsolute(rel) ? rel : path;
}

/** Says what failed and, when quiet, the end of the log, which holds wrangler's own words. */
function report(what) {
  console.error(`[edgecron] ${what}`);
  if (log === null) return;
  console.error(
    `[edgecron] the last lines of ${shown(logPath)}:\n${lastLines(logPath, TAIL_LINES)}\n[edgecron] the whole log: ${shown(logPath)}`,
  );
}

/** Marks where each command's output starts in the log. */
const section = (title) => log !== null && writeSync(log, `\n── ${title} (${new Date().toISOString()}) ──\n`);

if (!verbose) console.log(`[edgecron] starting; wrangler's output goes to ${shown(logPath)} (npm start -- --verbose shows it here)`);
section("wrangler d1 migrations apply");
// Into the state both Workers' `wrangler dev` open: the runner reads the same catalog.
const migrate = spawnSync(process.execPath, [wrangler, "d1", "migrations", "apply", "edgecron", "--local", "--persist-to", statePath], {
  cwd: root,
  stdio: ["ignore", log ?? "inherit", log ?? "inherit"],
  env: { ...process.env, CI: "true" }, // never prompt
});
if (migrate.status !== 0) {
  report(`the D1 migrations failed (${migrate.signal ?? `exit code ${migrate.status}`})`);
  process.exit(migrate.status || 1);
}

/**
 * Local secrets: made once and kept beside the local state, because targets sealed with one
 * ENCRYPTION_KEYS must open after a restart. Production sets its own with `wrangler secret put`.
 */
function devSecrets() {
  const path = persistTo ? `${persistTo}/dev-secrets.json` : new URL("../.wrangler/dev-secrets.json", import.meta.url).pathname;
  if (!existsSync(path)) {
    mkdirSync(dirname(path), { recursive: true });
    const secrets = { ENCRYPTION_KEYS: `dev1:${randomBytes(32).toString("base64")}`, SIGNING_SECRET: randomBytes(32).toString("hex") };
    writeFileSync(path, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  }
  return JSON.parse(readFileSync(path, "utf8"));
}

const vars = {
  API_TOKEN: token,
  // PUBLIC_URL lets targets that answer 202 find POST /v1/runs/:id/complete (X-Edgecron-Complete-Url).
  PUBLIC_URL: `http://localhost:${port}`,
  // Local targets live on loopback; a deployed Worker leaves this off.
  ALLOW_PRIVATE_TARGETS: "true",
  ...devSecrets(),
};
for (const name of ["ENCRYPTION_KEYS", "SIGNING_SECRET"]) if (process.env[name]) vars[name] = process.env[name];
for (const name of ["CLAIM_TIMEOUT_MS", "SHARD_COUNT"]) if (process.env[name]) vars[name] = process.env[name];
/** A TCP port of 127.0.0.1 that was free a moment ago. */
const freePort = () =>
  new Promise((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port: free } = probe.address();
      probe.close(() => resolve(String(free)));
    });
  });

/**
 * One `wrangler dev` of the topology (scripts/dev-topology.ts), with the stack's state and dev
 * registry. The one serving the API gets PORT; a runner alone gets a free port, which nobody
 * calls. wrangler's devtools port defaults to 9229 for every `wrangler dev`; two started at
 * once would fight over it, so each takes a free one (INSPECTOR_PORT: the API's).
 */
async function wranglerDev(configs, servesApi) {
  // The runner has no API: it neither checks the admin token nor is sent it.
  const own = servesApi ? vars : Object.fromEntries(Object.entries(vars).filter(([k]) => k !== "API_TOKEN"));
  const inspectorPort = (servesApi && process.env.INSPECTOR_PORT) || (await freePort());
  section(`wrangler dev ${configs.map((c) => `-c ${c}`).join(" ")}`);
  const child = spawn(
    process.execPath,
    [
      wrangler,
      "dev",
      ...configs.flatMap((c) => ["-c", c]),
      "--ip",
      "127.0.0.1",
      "--port",
      servesApi ? String(port) : await freePort(),
      "--inspector-port",
      inspectorPort,
      "--show-interactive-dev-session=false",
      // Every process on the same state: the runner's D1 binding is the scheduler's catalog.
      "--persist-to",
      statePath,
      ...Object.entries(own).flatMap(([k, v]) => ["--var", `${k}:${v}`]),
    ],
    {
      cwd: root,
      stdio: ["ignore", verbose ? "inherit" : "pipe", verbose ? "inherit" : "pipe"],
      // The vars in the environment too: --var reaches only the first config of a `wrangler dev`,
      // while a config that lists [secrets] takes its vars' and secrets' values from wrangler's
      // environment (and warns about a required secret missing there, even when --var has it).
      env: { ...process.env, WRANGLER_REGISTRY_PATH: registry, ...own },
    },
  );
  if (log !== null) {
    // One sorter per stream: an error's stack follows it on its own stream.
    for (const stream of [child.stdout, child.stderr]) {
      const sort = quietConsole({
        error: (line) => console.error(logLine(line)),
        sweep: (figures) => console.log(sweepLine(figures, new Date())),
      });
      // Line by line, so that a credential in a request's URL is marked even across chunks.
      eachLine(stream, (line) => {
        writeSync(log, `${logLine(line)}\n`);
        sort(line);
      });
    }
  }
  child.on("exit", async (code, signal) => {
    if (stopping) return;
    stopping = true;
    clearInterval(sweeper);
    // The others go first, so that the log's end, shown below, is its end. Its last lines may
    // still be in the pipe.
    const others = devs.filter((other) => other !== child && other.exitCode === null && other.signalCode === null);
    for (const other of others) other.kill("SIGTERM");
    await Promise.race([
      Promise.all([once(child, "close"), ...others.map((other) => once(other, "close"))]),
      new Promise((r) => setTimeout(r, 5_000)),
    ]);
    report(`${servesApi ? "wrangler dev" : "the runner's wrangler dev"} exited (${signal ?? `exit code ${code}`})`);
    process.exit(code || 1);
  });
  devs.push(child);
  return child;
}

let sweeper;
let stopping = false;
/** The `wrangler dev` processes, in the order they started. */
const devs = [];
/** Stops every wrangler dev, waiting a little for them, so that their last words still reach the log. */
async function stop(code, failure) {
  if (stopping) return;
  stopping = true;
  clearInterval(sweeper);
  if (failure) report(failure);
  const live = devs.filter((dev) => dev.exitCode === null && dev.signalCode === null);
  for (const dev of live) dev.kill("SIGTERM");
  await Promise.race([Promise.all(live.map((dev) => once(dev, "exit"))), new Promise((r) => setTimeout(r, 5_000))]);
  process.exit(code);
}
process.on("SIGINT", () => stop(0));
process.on("SIGTERM", () => stop(0));

const configs = processConfigs(topology);
// Entries a stack that was killed (kill -9, a crash) left behind name ports nobody listens on
// any more: read by the new processes, the scheduler would start before its runner had
// registered and the queue would send to the dead one, the runner would report to the dead
// scheduler, and every dispatch and report would be lost until wrangler noticed (30 to 80 s,
// attempts called up to 5 times: test/wrangler-dev/crowd.test.ts). Each Worker writes its own
// entry again once it is up; one of another stack of these Workers on the same registry would
// be overwritten by this one anyway, the registry being keyed by Worker name.
for (const name of [RUNNER_NAME, SCHEDULER_NAME]) rmSync(join(registry, name), { force: true });
for (const [i, configsOfOne] of configs.entries()) {
  const servesApi = i === configs.length - 1;
  await wranglerDev(configsOfOne, servesApi);
  if (servesApi) break;
  // The runner first, and the scheduler only once the registry lists the runner's consumers:
  // the scheduler's queue sends a message to whoever is registered then, and drops it when
  // nobody is (docs/runner.md).
  for (let waited = 0; !runnerRegistered(registry); waited += 100) {
    if (waited > 120_000) await stop(1, `the runner did not register in the dev registry (${shown(registry)}) within 2 minutes`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function sweep() {
  try {
    const res = await fetch(`${base}/cdn-cgi/local/scheduled?cron=${encodeURIComponent("* * * * *")}`);
    if (!res.ok)
      console.error(`[edgecron] ${clock(new Date())} sweep failed: HTTP ${res.status}${log === null ? "" : ` (see ${shown(logPath)})`}`);
  } catch (err) {
    console.error(`[edgecron] sweep could not reach wrangler dev: ${err.message}`);
  }
}

for (let i = 0; ; i++) {
  try {
    if ((await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2_000) })).ok) break;
  } catch {}
  if (i > 600) await stop(1, `wrangler dev did not answer on ${base}/healthz within 2 minutes`);
  await new Promise((r) => setTimeout(r, 200));
}
const url = `http://localhost:${port}`;
console.log(
  [
    "",
    `[edgecron] ready on ${url}`,
    `[edgecron]   admin token: ${token}`,
    `[edgecron]   dashboard:   ${url}/`,
    `[edgecron]   API docs:    ${url}/docs`,
    `[edgecron]   state:       ${shown(statePath)}`,
    `[edgecron]   log:         ${log === null ? "none (--verbose: wrangler's output is shown above)" : shown(logPath)}`,
    `[edgecron]   try:         curl -H 'Authorization: Bearer ${token}' ${base}/v1/jobs`,
    "",
  ].join("\n"),
);
await sweep(); // picks up anything a crash left between D1 and a shard before this start
sweeper = setInterval(sweep, sweepEveryMs);
