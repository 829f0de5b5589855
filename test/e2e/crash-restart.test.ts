import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cpSync, existsSync, readdirSync, readFileSync, readlinkSync, symlinkSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createConnection, createServer as createNetServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Server } from "node:http";
import { afterAll, describe, expect, it } from "vitest";
import { startReceiver, type Hit } from "../support/receiver";

/**
 * The whole stack, crashed and restarted: 1,000 one-off jobs fall due within a few seconds;
 * while their requests are being delivered (some of them in flight at the target), every
 * process of the stack (start.mjs, wrangler, workerd) is killed with SIGKILL at once, as a
 * power cut would. The stack is then started again on the same state directory and port.
 * Every job must end with exactly one run, succeeded; the target must have seen every run and
 * nothing else; every attempt must carry the run id as its Idempotency-Key.
 *
 * What the crash loses is left to the product to recover: the local Queue keeps its messages
 * in memory, so unclaimed dispatches are re-sent after CLAIM_TIMEOUT_MS; claimed attempts whose
 * outcome was never reported time out after timeoutMs + 5 s and are retried. The figures (how
 * many runs were in flight or lost, how long convergence took) are printed on one line starting
 * with `crash-test:`.
 */

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const N = 1_000;
/** Jobs created first, due in 7 days (they never fire here), to measure the creation rate... */
const CALIBRATION = 150;
/** ...once the first ones have woken the shards up (the first calls to a shard are slower). */
const CALIBRATION_WARMUP = 50;
const CREATE_CONCURRENCY = 16;
/** The jobs' instants are spread over this window after T. */
const SPREAD_MS = 4_000;
/** Slack between the estimated end of creation and T. */
const LEAD_MS = 3_000;
const CREATION_SAFETY = 1.5;
/** The receiver answers after this long, so that requests are in flight when the kill comes. */
const RECEIVER_DELAY_MS = 300;
const JOB_TIMEOUT_MS = 2_000;
/**
 * The kill costs a run at most one attempt; the others are headroom for a loaded machine, where
 * a 2 s timeout can expire before the receiver's answer is read (seen: ~3% of attempts).
 */
const MAX_ATTEMPTS = 5;
/**
 * The kill comes once the receiver has seen this share of the runs: random in [0.2, 0.5), so
 * that runs of the test hit different points of a batch's delivery (it is printed; set
 * CRASH_AT_FRACTION to repeat one).
 */
const CRASH_AT_FRACTION = Number(process.env.CRASH_AT_FRACTION) || 0.2 + Math.random() * 0.3;
const CLAIM_TIMEOUT_MS = 3_000;
const SWEEP_INTERVAL_MS = 3_000;
const READY_TIMEOUT_MS = 90_000;
const CONVERGE_TIMEOUT_MS = 120_000;
const READ_CONCURRENCY = 8;
/** A bound on each batch of API calls (creating the jobs, reading their runs). */
const PHASE_BUDGET_MS = 90_000;
const NON_FINAL = ["queued", "running", "retry_wait"];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---- the stack ----

interface Stack {
  child: ChildProcess;
  pgid: number;
  exited: { code: number | null; signal: string | null } | null;
  reloads: number;
  /** Killed and seen gone: its group id may belong to someone else now, so it is not signalled again. */
  gone: boolean;
  /** Lines of the stack's output that report an error (counted for the summary, not asserted). */
  errorLines: number;
  errorExamples: string[];
}

const output: string[] = [];
function keep(label: string, chunk: Buffer): void {
  output.push(`[${label}] ${chunk.toString("utf8")}`);
  if (output.length > 400) output.splice(0, output.length - 400);
}
/** The stacks' own output, for a failure message; only its tail is kept. */
const tail = () => output.join("").split("\n").slice(-80).join("\n");

let tempDir: string | undefined;
let tree = "";
let port = 0;
let base = "";
const token = `crash-${randomBytes(8).toString("hex")}`;
const stacks: Stack[] = [];
let receiver: { url: string; server: Server; hits: Map<string, Hit[]> } | undefined;

async function freePort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * `wrangler dev` reloads the worker whenever a source file changes, and the working tree may be
 * edited while this test runs; both starts must also run the same code. So the stack runs from
 * a snapshot of what `npm start` uses (node_modules linked), taken once.
 */
function snapshotTree(into: string): string {
  for (const name of ["package.json", "wrangler.toml", "tsconfig.json", "src", "scripts", "migrations"]) {
    if (existsSync(join(ROOT, name))) cpSync(join(ROOT, name), join(into, name), { recursive: true });
  }
  symlinkSync(join(ROOT, "node_modules"), join(into, "node_modules"), "dir");
  return into;
}

/** What `npm start` runs, in its own process group, with the same environment every time. */
function startStack(label: string): Stack {
  const child = spawn(process.execPath, [join(tree, "scripts", "start.mjs")], {
    cwd: tree,
    detached: true, // its own process group: the kill reaches wrangler and workerd with it
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      PORT: String(port),
      PERSIST_DIR: join(tempDir!, "state"),
      WRANGLER_REGISTRY_PATH: join(tempDir!, "registry"),
      API_TOKEN: token,
      CLAIM_TIMEOUT_MS: String(CLAIM_TIMEOUT_MS),
      SWEEP_INTERVAL_MS: String(SWEEP_INTERVAL_MS),
      WRANGLER_SEND_METRICS: "false",
    },
  });
  const stack: Stack = { child, pgid: child.pid!, exited: null, reloads: 0, gone: false, errorLines: 0, errorExamples: [] };
  const onData = (chunk: Buffer) => {
    keep(label, chunk);
    for (const line of chunk.toString("utf8").split(/\r?\n/)) {
      if (/Reloading local server/.test(line)) stack.reloads++;
      else if (/ERROR|Error|error|failed|unreachable|did not confirm|✘/.test(line) && !/update available|trace-stream|tail session/.test(line)) {
        stack.errorLines++;
        if (stack.errorExamples.length < 3) stack.errorExamples.push(line.replace(/\x1b\[[0-9;]*[A-Za-z]/g, "").slice(0, 200));
      }
    }
  };
  child.stdout?.on("data", onData);
  child.stderr?.on("data", onData);
  child.on("exit", (code, signal) => {
    stack.exited = { code, signal };
  });
  stacks.push(stack);
  return stack;
}

/** State and process group of a task, from its /proc stat line. */
function readStat(path: string): { state: string; pgrp: number } | null {
  try {
    const stat = readFileSync(path, "utf8");
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so parse after the last ')'.
    const [state = "", , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { state, pgrp: Number(pgrp) };
  } catch {
    return null; // gone meanwhile
  }
}

const dead = (state: string) => state === "Z" || state === "X";

/**
 * Processes of a group that still have a live thread, read from /proc. A killed process's main
 * thread can show as a zombie while its other threads are still exiting and its sockets are
 * still open, so every thread is looked at.
 */
function liveMembers(pgid: number): number[] {
  const live: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readStat(`/proc/${entry}/stat`);
    if (!stat || stat.pgrp !== pgid) continue;
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${entry}/task`);
    } catch {}
    if (!dead(stat.state) || tasks.some((t) => !dead(readStat(`/proc/${entry}/task/${t}/stat`)?.state ?? "X"))) live.push(Number(entry));
  }
  return live;
}

/** Who holds a listening TCP socket on the port (pid and command), for a failure message. */
function portOwners(p: number): string[] {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    try {
      for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
        const f = line.trim().split(/\s+/);
        if (f[1]?.endsWith(`:${p.toString(16).toUpperCase().padStart(4, "0")}`) && f[3] === "0A") inodes.add(f[9]!);
      }
    } catch {}
  }
  const owners: string[] = [];
  if (inodes.size === 0) return owners;
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        const link = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (link && inodes.has(link[1]!)) {
          owners.push(`${pid} (pgrp ${readStat(`/proc/${pid}/stat`)?.pgrp}): ${readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ").slice(0, 160)}`);
          break;
        }
      }
    } catch {}
  }
  return owners.length > 0 ? owners : [`listening socket(s) ${[...inodes].join(", ")}, owner not found`];
}

async function killGroup(pgid: number, signal: NodeJS.Signals): Promise<void> {
  try {
    process.kill(-pgid, signal);
  } catch {
    // no process left in the group
  }
}

/** SIGKILL to the whole group, then waits (bounded) until none of its processes is alive. */
async function crashGroup(pgid: number, timeoutMs = 10_000): Promise<number[]> {
  await killGroup(pgid, "SIGKILL");
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const live = liveMembers(pgid);
    if (live.length === 0 || Date.now() > deadline) return live;
    await killGroup(pgid, "SIGKILL");
    await sleep(50);
  }
}

/** True when a TCP connection to the port is refused. */
function refused(p: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port: p });
    socket.setTimeout(2_000);
    socket.once("connect", () => (socket.destroy(), resolve(false)));
    socket.once("timeout", () => (socket.destroy(), resolve(false)));
    socket.once("error", (err: NodeJS.ErrnoException) => resolve(err.code === "ECONNREFUSED"));
  });
}

/** Waits (bounded) until connections to the port are refused; how long that took, or null. */
async function untilPortClosed(p: number, timeoutMs = 10_000): Promise<number | null> {
  const start = Date.now();
  for (;;) {
    if (await refused(p)) return Date.now() - start;
    if (Date.now() - start > timeoutMs) return null;
    await sleep(100);
  }
}

async function waitReady(stack: Stack): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (stack.exited) throw new Error(`the stack exited during startup (${JSON.stringify(stack.exited)})\n${tail()}`);
    try {
      if ((await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2_000) })).status === 200) {
        // The token is random: a 200 proves the port is this stack's, not another server's.
        const list = await api("GET", "/v1/jobs?limit=1");
        if (list.status === 200) return;
        throw new Error(`/healthz answered but GET /v1/jobs gave ${list.status}: is another server on port ${port}?\n${tail()}`);
      }
    } catch (err) {
      if ((err as Error).message.includes("is another server")) throw err;
    }
    if (Date.now() > deadline) throw new Error(`no answer from ${base}/healthz within ${READY_TIMEOUT_MS} ms\n${tail()}`);
    await sleep(200);
  }
}

// ---- the API ----

async function api(method: string, path: string, body?: unknown, timeoutMs = 20_000): Promise<{ status: number; json: any }> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${base}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  try {
    return { status: res.status, json: JSON.parse(text) };
  } catch {
    return { status: res.status, json: { unparsable: text.slice(0, 500) } };
  }
}

/** Runs `task(i)` for i < count with at most `limit` in flight; starts none after `budgetMs`. */
async function pool(what: string, count: number, limit: number, budgetMs: number, task: (i: number) => Promise<void>): Promise<void> {
  const deadline = Date.now() + budgetMs;
  let next = 0;
  const worker = async () => {
    while (next < count && Date.now() <= deadline) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  if (next < count) throw new Error(`${what}: only ${next} of ${count} done within ${budgetMs} ms\n${tail()}`);
}

/**
 * Creates `count` one-off jobs; `at(i)` is read when request i is sent. Failed creations are
 * not retried (a request that reached the server would make a second job): they fail the test.
 */
async function createJobs(count: number, at: (i: number) => number, path: string): Promise<{ jobs: Array<{ id: string; at: number }>; doneAt: number[] }> {
  const jobs: Array<{ id: string; at: number }> = new Array(count);
  const doneAt: number[] = [];
  const failures: string[] = [];
  await pool(`creating ${count} jobs`, count, CREATE_CONCURRENCY, PHASE_BUDGET_MS, async (i) => {
    const instant = at(i);
    try {
      const res = await api("POST", "/v1/jobs", {
        schedule: { at: new Date(instant).toISOString() },
        target: { url: `${receiver!.url}/hit/${path}?delayMs=${RECEIVER_DELAY_MS}`, method: "POST" },
        retry: { maxAttempts: MAX_ATTEMPTS },
        timeoutMs: JOB_TIMEOUT_MS,
      });
      if (res.status !== 201) failures.push(`job ${i}: HTTP ${res.status} ${JSON.stringify(res.json).slice(0, 300)}`);
      else {
        jobs[i] = { id: res.json.id, at: instant };
        doneAt.push(Date.now());
      }
    } catch (err) {
      failures.push(`job ${i}: ${(err as Error).message}`);
    }
  });
  if (failures.length > 0) throw new Error(`${failures.length} of ${count} creations failed, e.g. ${failures.slice(0, 3).join("; ")}\n${tail()}`);
  return { jobs, doneAt };
}

async function metrics(): Promise<any> {
  const res = await api("GET", "/v1/metrics?window=1h");
  if (res.status !== 200) throw new Error(`GET /v1/metrics: HTTP ${res.status} ${JSON.stringify(res.json)}`);
  return res.json;
}

const sum = (counts: Record<string, number>, states: string[]) => states.reduce((n, s) => n + (counts[s] ?? 0), 0);
const total = (counts: Record<string, number>) => Object.values(counts).reduce((n, v) => n + v, 0);
/** The run id edgecron derives for a scheduled fire (src/model/ids.ts). */
const runIdOf = (jobId: string, at: number) => `run_${jobId.slice("job_".length)}_${at.toString(36)}`;
const countBy = <T>(items: T[], key: (t: T) => string) =>
  items.reduce<Record<string, number>>((acc, t) => ((acc[key(t)] = (acc[key(t)] ?? 0) + 1), acc), {});

afterAll(async () => {
  const survivors: number[] = [];
  for (const stack of stacks) {
    if (stack.gone) continue;
    await killGroup(stack.pgid, "SIGTERM");
    for (let waited = 0; waited < 5_000 && liveMembers(stack.pgid).length > 0; waited += 100) await sleep(100);
    survivors.push(...(await crashGroup(stack.pgid)));
  }
  if (receiver) {
    receiver.server.closeAllConnections();
    await new Promise<void>((resolve) => receiver!.server.close(() => resolve()));
  }
  if (tempDir) await rm(tempDir, { recursive: true, force: true });
  if (survivors.length > 0) throw new Error(`processes ${survivors.join(", ")} (wrangler/workerd) survived SIGKILL`);
});

describe("a whole-stack crash (SIGKILL of wrangler, workerd and all) in the middle of a burst", () => {
  it("ends every one-off job with exactly one succeeded run after a restart on the same state", { timeout: 300_000 }, async () => {
    const t0 = Date.now();
    const summary: Record<string, unknown> = { ok: false, jobs: N };
    const since = (t: number) => Date.now() - t;
    try {
      receiver = await startReceiver();
      receiver.server.keepAliveTimeout = 30_000;
      tempDir = await mkdtemp(join(tmpdir(), "edgecron-crash-"));
      tree = snapshotTree(join(tempDir, "tree"));
      port = await freePort();
      base = `http://127.0.0.1:${port}`;
      // 2. The target: records every request, answers 200 after RECEIVER_DELAY_MS.
      const hits = () => receiver!.hits.get("crash") ?? [];

      // 1. The stack, as npm start runs it.
      const first = startStack("run 1");
      await waitReady(first);
      summary.startMs = since(t0);

      // 3. Calibration (due in 7 days), then the 1,000 jobs due at T + [0, SPREAD_MS).
      const calStart = Date.now();
      const { doneAt } = await createJobs(CALIBRATION, () => calStart + 7 * 86_400_000, "calibration");
      const ratePerMs = (CALIBRATION - CALIBRATION_WARMUP) / Math.max(1, doneAt.at(-1)! - doneAt[CALIBRATION_WARMUP - 1]!);
      const T = Date.now() + Math.ceil((N / ratePerMs) * CREATION_SAFETY) + LEAD_MS;
      const createStart = Date.now();
      const { jobs } = await createJobs(N, (i) => T + Math.floor((i * SPREAD_MS) / N), "crash");
      const createdAt = Date.now();
      Object.assign(summary, {
        createMs: createdAt - createStart,
        createPerSecond: Math.round((N / Math.max(1, createdAt - createStart)) * 1000),
        createdBeforeFirstDueMs: T - createdAt,
      });
      expect(new Set(jobs.map((j) => j.id)).size).toBe(N);
      const expected = new Map(jobs.map((j) => [runIdOf(j.id, j.at), j]));

      // 4. The kill, once creation is over and the receiver has seen ~30% of the runs.
      const crashDeadline = Math.max(T, createdAt) + 60_000;
      const seenIds = () => new Set(hits().map((h) => h.headers["x-edgecron-run-id"]));
      while (seenIds().size < N * CRASH_AT_FRACTION) {
        if (first.exited) throw new Error(`the stack exited before the crash (${JSON.stringify(first.exited)})\n${tail()}`);
        if (Date.now() > crashDeadline) {
          throw new Error(`only ${seenIds().size} of ${N} runs reached the receiver within 60 s of T\n${JSON.stringify(await metrics().catch((e) => String(e)))}\n${tail()}`);
        }
        await sleep(10);
      }
      const crashAt = Date.now();
      const survivors = await crashGroup(first.pgid);
      summary.groupGoneAfterKillMs = Date.now() - crashAt;
      expect(survivors, `processes of group ${first.pgid} survived SIGKILL`).toEqual([]);
      first.gone = true;
      const portClosedMs = await untilPortClosed(port);
      if (portClosedMs === null) {
        throw new Error(`port ${port} still accepts connections 10 s after the kill; listening: ${JSON.stringify(portOwners(port))}\n${tail()}`);
      }
      summary.portClosedAfterKillMs = Date.now() - crashAt;
      const hitsAtCrash = hits().filter((h) => h.receivedAt <= crashAt);
      const seenBeforeCrash = new Set(hitsAtCrash.map((h) => h.headers["x-edgecron-run-id"]));
      Object.assign(summary, {
        crashAtFraction: Number(CRASH_AT_FRACTION.toFixed(3)),
        crashAfterFirstDueMs: crashAt - T,
        receivedAtCrash: seenBeforeCrash.size,
        // Received, and not yet answered when the kill came (the receiver answers after RECEIVER_DELAY_MS).
        unansweredAtCrash: hitsAtCrash.filter((h) => h.receivedAt > crashAt - RECEIVER_DELAY_MS).length,
      });

      // 5. The same stack again, on the same state and port.
      const second = startStack("run 2");
      await waitReady(second);
      const readyAt = Date.now();
      summary.downMs = readyAt - crashAt;

      // 6. Until every run is final: cheap polling of the metrics, then a check of every job.
      let last: any;
      const convergeDeadline = readyAt + CONVERGE_TIMEOUT_MS;
      for (;;) {
        if (second.exited) throw new Error(`the restarted stack exited (${JSON.stringify(second.exited)})\n${tail()}`);
        try {
          last = await metrics();
          const byState = last.runsByState as Record<string, number>;
          if (total(byState) >= N && sum(byState, NON_FINAL) === 0) break;
        } catch (err) {
          last = String(err);
        }
        if (Date.now() > convergeDeadline) {
          throw new Error(`runs not final ${CONVERGE_TIMEOUT_MS} ms after the restart: ${JSON.stringify(last)}\n${tail()}`);
        }
        await sleep(500);
      }
      const convergedAt = Date.now();
      Object.assign(summary, {
        convergeAfterRestartMs: convergedAt - readyAt,
        convergeAfterCrashMs: convergedAt - crashAt,
        runsByState: last.runsByState,
        fireLagMs: last.fireLagMs,
      });
      // Any late request (an attempt given up on whose request still went out) would come now.
      await sleep(1_000);

      // 7. Every job: exactly one run, the one of its instant, succeeded.
      const runs = new Map<string, any>();
      const problems: string[] = [];
      await pool(`reading the runs of ${N} jobs`, N, READ_CONCURRENCY, PHASE_BUDGET_MS, async (i) => {
        const job = jobs[i]!;
        const res = await api("GET", `/v1/jobs/${job.id}/runs?limit=10`);
        if (res.status !== 200) return void problems.push(`${job.id}: GET runs HTTP ${res.status}`);
        const items = res.json.items as any[];
        if (items.length !== 1) problems.push(`${job.id}: ${items.length} runs: ${JSON.stringify(items)}`);
        for (const run of items) runs.set(run.id, run);
      });
      const runList = [...runs.values()];
      const seen = new Map<string, Hit[]>();
      for (const hit of hits()) {
        const id = hit.headers["x-edgecron-run-id"] ?? "(none)";
        seen.set(id, [...(seen.get(id) ?? []), hit]);
      }
      const multiAttempt = runList.filter((r) => r.attempts > 1);
      const logs = new Map<string, any>();
      await pool(`reading ${multiAttempt.length} retried runs`, multiAttempt.length, READ_CONCURRENCY, PHASE_BUDGET_MS, async (i) => {
        const res = await api("GET", `/v1/runs/${multiAttempt[i]!.id}`);
        if (res.status === 200) logs.set(res.json.id, res.json);
      });
      const retriedAttempts = [...logs.values()].flatMap((r) => (r.attemptLog as any[]).map((a) => ({ ...a, runId: r.id as string })));
      const attemptOutcomes = countBy(retriedAttempts, (a) => a.outcome);
      // Why attempts did not succeed (numbers blanked), and whether the receiver got those requests.
      const attemptErrors = countBy(
        retriedAttempts.filter((a) => a.outcome !== "succeeded"),
        (a) => `${a.outcome}: ${String(a.error).replace(/\d+/g, "#").slice(0, 80)}${(seen.get(a.runId) ?? []).some((h) => Number(h.headers["x-edgecron-attempt"]) === a.attempt) ? " (received)" : " (not received)"}`,
      );
      const receivedTwice = [...seen.values()].filter((list) => list.length > 1);
      Object.assign(summary, {
        receiverHits: hits().length,
        runsWithMoreThanOneAttempt: multiAttempt.length,
        runsReceivedMoreThanOnce: receivedTwice.length,
        // Retried, yet the target saw one request: an attempt was claimed but its request never went out (killed first).
        runsRetriedButReceivedOnce: multiAttempt.filter((r) => (seen.get(r.id)?.length ?? 0) === 1).length,
        // Not seen before the kill and delivered on the first attempt after it: their dispatches were lost with the queue, or not yet due.
        runsFirstReceivedAfterRestart: runList.filter((r) => !seenBeforeCrash.has(r.id)).length,
        attemptOutcomesOfRetriedRuns: attemptOutcomes,
        attemptErrors,
        maxAttempts: Math.max(0, ...runList.map((r) => r.attempts)),
        reloads: stacks.map((s) => s.reloads),
        stackErrorLines: stacks.map((s) => s.errorLines),
        stackErrorExamples: stacks.flatMap((s) => s.errorExamples),
        totalMs: since(t0),
      });

      expect(problems, problems.slice(0, 5).join("\n")).toEqual([]);
      expect(runs.size).toBe(N);
      expect(last.runsByState).toEqual({ succeeded: N });
      for (const [id, job] of expected) {
        const run = runs.get(id);
        expect(run, `job ${job.id}: no run ${id}`).toBeDefined();
        expect(run).toMatchObject({ jobId: job.id, trigger: "schedule", state: "succeeded", status: 200, error: null });
        expect(run.scheduledAt).toBe(new Date(job.at).toISOString());
      }
      // The receiver saw every run, and nothing but these runs.
      expect([...seen.keys()].filter((id) => !expected.has(id)), "run ids the receiver saw that no job has").toEqual([]);
      expect([...expected.keys()].filter((id) => !seen.has(id)), "runs the receiver never saw").toEqual([]);
      for (const [id, list] of seen) {
        const run = runs.get(id)!;
        for (const hit of list) {
          expect(hit.method).toBe("POST");
          expect(hit.headers["idempotency-key"], `an attempt of ${id}`).toBe(id);
          expect(hit.headers["x-edgecron-job-id"]).toBe(run.jobId);
          expect(hit.headers["x-edgecron-scheduled-at"]).toBe(run.scheduledAt);
        }
        // One request per attempt: each attempt number once, the last (succeeded) one among them.
        const attempts = list.map((h) => Number(h.headers["x-edgecron-attempt"]));
        expect(new Set(attempts).size, `run ${id} received attempts ${attempts.join(",")}`).toBe(attempts.length);
        expect(attempts.every((a) => Number.isInteger(a) && a >= 1 && a <= run.attempts), `run ${id}: attempts ${attempts} of ${run.attempts}`).toBe(true);
        expect(attempts, `run ${id}: its succeeded attempt ${run.attempts} never reached the receiver`).toContain(run.attempts);
      }
      summary.ok = true;
    } finally {
      summary.totalMs ??= since(t0);
      console.log(`crash-test: ${JSON.stringify(summary)}`);
    }
  });
});
