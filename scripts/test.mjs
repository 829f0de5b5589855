#!/usr/bin/env node
/**
 * `npm test`'s test run: the vitest projects in three processes side by side, each printing its
 * report whole when it ends, and a failure if any of them failed.
 *
 * Why processes: one vitest process runs one test file at a time here, however its projects are
 * set (the workerd projects go one file at a time on purpose: fault points are armed per
 * isolate), and most files spend their time waiting on queues, alarms, receivers and `wrangler
 * dev`. Each process has its own workerd (its own isolate, so fault points stay apart), its own
 * loopback receiver and its own stacks, so they cannot see each other's state.
 *
 * Arguments go to every lane's vitest (a file filter, `-t name`, …); `--lanes workers,e2e`
 * runs only those lanes.
 */
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/**
 * Each lane: the projects one vitest process runs, about the same length each (in that order).
 * test/README.md says which test folders each project holds.
 */
const LANES = {
  workers: ["workers"],
  "workers-2": ["workers-2", "strict"],
  e2e: ["unit", "e2e"],
};

// vitest's own command (its package exports no path to it; its package.json is exported).
const vitest = join(dirname(createRequire(import.meta.url).resolve("vitest/package.json")), "vitest.mjs");
const args = process.argv.slice(2);
const lanesFlag = args.indexOf("--lanes");
const chosen = lanesFlag >= 0 ? args.splice(lanesFlag, 2)[1].split(",") : Object.keys(LANES);
const unknown = chosen.filter((lane) => !(lane in LANES));
if (unknown.length > 0) {
  console.error(`unknown lane ${unknown.join(", ")}: the lanes are ${Object.keys(LANES).join(", ")}`);
  process.exit(2);
}

const started = Date.now();
const children = [];
// Ctrl-C or a CI timeout: the lanes stop with us (each vitest stops its own workerd and stacks).
// Set before the lanes start: the wait below holds the rest of this module back until they end.
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    for (const child of children) child.kill(signal);
    process.exit(130);
  });
}
const results = await Promise.all(chosen.map((lane) => run(lane, LANES[lane])));
const failed = results.filter((r) => r.code !== 0);
console.log(
  `\n${results.map((r) => `${r.lane}: ${r.code === 0 ? "passed" : `FAILED (${r.code})`} in ${r.seconds} s`).join("; ")}; ${seconds(started)} s in all`,
);
process.exit(failed.length > 0 ? 1 : 0);

/** One vitest process; its output is kept and printed whole when it ends, so lanes never interleave. */
function run(lane, projects) {
  const laneStart = Date.now();
  const out = [];
  const child = spawn(process.execPath, [vitest, "run", ...projects.flatMap((p) => ["--project", p]), ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, FORCE_COLOR: process.env.FORCE_COLOR ?? (process.stdout.isTTY ? "1" : "0") },
  });
  children.push(child);
  child.stdout.on("data", (chunk) => out.push(chunk));
  child.stderr.on("data", (chunk) => out.push(chunk));
  console.log(`[${lane}] started: vitest run ${projects.map((p) => `--project ${p}`).join(" ")}`);
  return new Promise((resolve) => {
    child.on("close", (code, signal) => {
      const result = { lane, code: code ?? (signal ? 128 : 1), seconds: seconds(laneStart) };
      process.stdout.write(`\n──── ${lane}: ${result.code === 0 ? "passed" : "FAILED"} in ${result.seconds} s ────\n`);
      process.stdout.write(Buffer.concat(out));
      resolve(result);
    });
  });
}

function seconds(since) {
  return Math.round((Date.now() - since) / 1000);
}
