import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cpSync, existsSync, readdirSync, readFileSync, readlinkSync, symlinkSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { type AddressInfo, createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Topology } from "../../scripts/dev-topology.ts";
import { eachLine } from "./lines.ts";

/**
 * The real local stack for Node end-to-end tests, started exactly as `npm start` runs it
 * (scripts/start.mjs: local D1 migrations, the runner's `wrangler dev` and, once it is in the
 * dev registry, the scheduler's, the periodic sweep), in its own process group, on a free port,
 * with its state, its dev registry (shared by both processes: WRANGLER_REGISTRY_PATH), and, if
 * asked, a snapshot of the sources, in a temporary directory of its own; and stopped with every
 * process it started.
 *
 *   const stack = await startStack({ env: { SWEEP_INTERVAL_MS: "5000" } });
 *   const { status, json } = await stack.api("GET", "/v1/jobs");
 *   await stack.stop();
 *
 * It runs verbose (EDGECRON_VERBOSE=1): `onLine` and `tail()` get wrangler's own lines (the
 * Worker's logs, queue batches, reloads, errors), which `npm start` otherwise keeps in a log file.
 * `quiet: true` starts it as a developer's `npm start` does, to test what that prints.
 *
 * `start.mjs` gives each `wrangler dev` a free devtools port of its own, so stacks started at
 * once no longer race for 9229 (3 stacks started at once, 18 times: none failed; with
 * wrangler's default port, 9 of 39 starts failed with "Address already in use"). A start that
 * fails is therefore not tried again.
 */

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** What `npm start` needs from the working tree, for a snapshot. */
const TREE = ["package.json", "wrangler.toml", "runner", "tsconfig.json", "src", "scripts", "migrations", "dashboard"];
const OUTPUT_LINES_KEPT = 2_000;

export interface StackOptions {
  /** More environment for start.mjs, e.g. SWEEP_INTERVAL_MS, CLAIM_TIMEOUT_MS. */
  env?: Record<string, string>;
  /**
   * "two": the runner Worker as a second `wrangler dev`, started and registered before the
   * scheduler's; "one": both Workers in one. start.mjs's default when unset (scripts/dev-topology.ts).
   */
  topology?: Topology;
  /** The API token; by default a random one, so that an answer with it proves the port is this stack's. */
  token?: string;
  /**
   * Run from a copy of the sources (node_modules linked), taken once here and kept for
   * `restart()`, rather than from the working tree: `wrangler dev` reloads the Worker when a
   * watched file changes, and the working tree may be edited while a test runs.
   */
  snapshot?: boolean;
  /** Starts it without EDGECRON_VERBOSE: its output is then start.mjs's own, wrangler's goes to its log file. */
  quiet?: boolean;
  /** Prefixed to each line of the stack's output in `tail()`. */
  label?: string;
  /** Called with each line of the stack's output and the stream it came on. */
  onLine?: OnLine;
  readyTimeoutMs?: number;
  /** Aborting it ends a start still waiting for readiness: what was started is stopped and the start fails. */
  signal?: AbortSignal;
  /** How the temporary directory's name starts; "edgecron-e2e-" by default. */
  dirPrefix?: string;
  /** Leaves the temporary directory (state, registry, snapshot) in place after `stop()`, to be looked at. */
  keepDir?: boolean;
  /**
   * SIGKILLs the process group if this process exits while the stack still runs, e.g. through
   * `process.exit()` after a second Ctrl-C: wrangler and workerd are not its children once
   * detached, so nothing else would end them.
   */
  killOnExit?: boolean;
}

export type OnLine = (line: string, stream: "stdout" | "stderr") => void;

export interface ApiResponse {
  status: number;
  /** The parsed body, or `{ unparsable: text }`. */
  json: any;
  headers: Headers;
}

export interface ApiOptions {
  auth?: boolean;
  /** A bearer token other than the stack's, e.g. a tenant's API key. */
  token?: string;
  timeoutMs?: number;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Stack {
  /** http://127.0.0.1:<port> */
  readonly base: string;
  readonly port: number;
  readonly token: string;
  /** The temporary directory of this stack and of those it restarts: state/, registry/ and, for a snapshot, tree/. */
  readonly dir: string;
  /** The D1/Durable Object state directory (PERSIST_DIR). */
  readonly persistDir: string;
  /** The process group of start.mjs, wrangler and workerd. */
  readonly pgid: number;
  /** How start.mjs exited, once it has. */
  readonly exited: Exit | null;
  /** Times `wrangler dev` reloaded the Worker after it was ready (a watched source file changed). */
  readonly reloads: number;
  /** The last `lines` non-empty lines of the output of this stack and of those it restarted from. */
  tail(lines?: number): string;
  /** An API call with the stack's token (or `token`; none with `auth: false`); 20 s timeout by default. */
  api(method: string, path: string, body?: unknown, options?: ApiOptions): Promise<ApiResponse>;
  /**
   * SIGTERM to the process group, SIGKILL if it is still there after 10 s; fails unless every
   * thread of the group is gone. Removes the temporary directory once no stack runs in it.
   */
  stop(): Promise<void>;
  /**
   * A crash: SIGKILL to the whole group at once. Fails unless every thread of the group is gone
   * and the port refuses connections within 10 s; resolves with how long each took.
   */
  kill9(): Promise<{ groupGoneMs: number; portClosedMs: number }>;
  /** The same stack again, once this one is gone: same port, token, state, sources and environment. */
  restart(options?: { label?: string; onLine?: OnLine }): Promise<Stack>;
}

/** What the starts of one stack share: its directory, port, token, sources and output. */
interface Home {
  dir: string;
  cwd: string;
  port: number;
  token: string;
  env: Record<string, string>;
  quiet: boolean;
  readyTimeoutMs: number;
  signal: AbortSignal | undefined;
  keepDir: boolean;
  killOnExit: boolean;
  output: string[];
  running: Set<Stack>;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A TCP port of 127.0.0.1 that was free a moment ago. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * Polls `check` (every `intervalMs`) until it returns a value other than undefined, and returns
 * it; fails with `what` after `timeoutMs`, or as soon as `stack` has exited, with its output.
 */
export async function until<T>(
  what: string,
  timeoutMs: number,
  check: () => Promise<T | undefined> | T | undefined,
  stack?: Stack,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  const output = () => (stack ? `\n${stack.tail()}` : "");
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (stack?.exited) throw new Error(`the stack exited (${JSON.stringify(stack.exited)}) while waiting for ${what}${output()}`);
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${output()}`);
    await sleep(intervalMs);
  }
}

/** Starts the stack and waits until it answers; if it does not, ends it and fails with its output. */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const dir = await mkdtemp(join(tmpdir(), options.dirPrefix ?? "edgecron-e2e-"));
  let cwd = ROOT;
  if (options.snapshot) {
    cwd = join(dir, "tree");
    for (const name of TREE) if (existsSync(join(ROOT, name))) cpSync(join(ROOT, name), join(cwd, name), { recursive: true });
    symlinkSync(join(ROOT, "node_modules"), join(cwd, "node_modules"), "dir");
  }
  const home: Home = {
    dir,
    cwd,
    port: await freePort(),
    token: options.token ?? `e2e-${randomBytes(16).toString("hex")}`,
    env: { ...options.env, ...(options.topology && { EDGECRON_TOPOLOGY: options.topology }) },
    quiet: options.quiet ?? false,
    readyTimeoutMs: options.readyTimeoutMs ?? 90_000,
    signal: options.signal,
    keepDir: options.keepDir ?? false,
    killOnExit: options.killOnExit ?? false,
    output: [],
    running: new Set(),
  };
  return launch(home, options.label ?? "stack", options.onLine);
}

async function launch(home: Home, label: string, onLine?: OnLine): Promise<Stack> {
  const { port, token } = home;
  const base = `http://127.0.0.1:${port}`;
  const persistDir = join(home.dir, "state");
  const child = spawn(process.execPath, [join(home.cwd, "scripts", "start.mjs")], {
    cwd: home.cwd,
    detached: true, // its own process group, so that a signal to it reaches wrangler and workerd
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      ...home.env,
      PORT: String(port),
      PERSIST_DIR: persistDir,
      WRANGLER_REGISTRY_PATH: join(home.dir, "registry"),
      API_TOKEN: token,
      WRANGLER_SEND_METRICS: "false",
      EDGECRON_VERBOSE: home.quiet ? "0" : "1",
    },
  });
  const pgid = child.pid!;
  let exited: Exit | null = null;
  let ready = false;
  let reloads = 0;
  let gone = false;
  child.on("exit", (code, signal) => {
    exited = { code, signal };
  });
  const killOnExit = () => {
    if (!gone) signalGroup(pgid, "SIGKILL");
  };
  if (home.killOnExit) process.on("exit", killOnExit);
  const markGone = () => {
    gone = true;
    process.off("exit", killOnExit);
  };
  const take = (line: string, name: "stdout" | "stderr") => {
    if (ready && /Reloading local server/.test(line)) reloads++;
    onLine?.(line, name);
    if (line.trim() === "") return;
    home.output.push(`[${label}] ${line}`);
    if (home.output.length > OUTPUT_LINES_KEPT) home.output.splice(0, home.output.length - OUTPUT_LINES_KEPT);
  };
  eachLine(child, take);

  const tail = (lines = 150) => home.output.slice(-lines).join("\n");

  async function api(method: string, path: string, body?: unknown, options: ApiOptions = {}): Promise<ApiResponse> {
    const { auth = true, timeoutMs = 20_000 } = options;
    const headers: Record<string, string> = {};
    if (auth) headers.authorization = `Bearer ${options.token ?? token}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await fetch(`${base}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = { unparsable: text.slice(0, 2_000) };
    }
    return { status: res.status, json, headers: res.headers };
  }

  /** SIGKILL until no thread of the group is left, or the deadline; what is left. */
  async function killAll(timeoutMs: number): Promise<number[]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const live = liveMembers(pgid);
      if (live.length === 0 || Date.now() > deadline) return live;
      signalGroup(pgid, "SIGKILL");
      await sleep(50);
    }
  }

  const survived = (live: number[]) =>
    new Error(`processes ${live.join(", ")} of group ${pgid} (wrangler/workerd) survived SIGKILL\n${tail()}`);

  const stack: Stack = {
    base,
    port,
    token,
    dir: home.dir,
    persistDir,
    pgid,
    get exited() {
      return exited;
    },
    get reloads() {
      return reloads;
    },
    tail,
    api,
    async stop() {
      let live: number[] = [];
      if (!gone) {
        signalGroup(pgid, "SIGTERM");
        for (let waited = 0; waited < 10_000 && liveMembers(pgid).length > 0; waited += 100) await sleep(100);
        live = await killAll(10_000);
        // Once seen gone its group id may be reused by someone else: it is not signalled again.
        if (live.length === 0) markGone();
      }
      if (gone) home.running.delete(stack);
      if (home.running.size === 0 && !home.keepDir) await rm(home.dir, { recursive: true, force: true });
      if (live.length > 0) throw survived(live);
    },
    async kill9() {
      if (gone) throw new Error(`kill9: the stack of group ${pgid} is already gone`);
      const start = Date.now();
      const live = await killAll(10_000);
      if (live.length > 0) throw survived(live);
      markGone();
      home.running.delete(stack);
      const groupGoneMs = Date.now() - start;
      while (!(await refused(port))) {
        if (Date.now() - start > groupGoneMs + 10_000) {
          throw new Error(
            `port ${port} still accepts connections 10 s after the kill; listening: ${JSON.stringify(portOwners(port))}\n${tail()}`,
          );
        }
        await sleep(100);
      }
      return { groupGoneMs, portClosedMs: Date.now() - start };
    },
    async restart(options = {}) {
      if (!gone) throw new Error(`restart: the stack of group ${pgid} is still running; stop() or kill9() it first`);
      return launch(home, options.label ?? label, options.onLine ?? onLine);
    },
  };
  home.running.add(stack);

  try {
    await until(
      `${base}/healthz to answer 200`,
      home.readyTimeoutMs,
      async () => {
        if (home.signal?.aborted) throw new Error(`the start of the stack on port ${port} was aborted`);
        try {
          if ((await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2_000) })).status !== 200) return undefined;
        } catch {
          return undefined;
        }
        // Only this stack has its token: a 200 proves the port is this stack's, not another server's.
        const list = await api("GET", "/v1/jobs?limit=1");
        if (list.status !== 200)
          throw new Error(`/healthz answered but GET /v1/jobs gave ${list.status}: is another server on port ${port}?\n${tail()}`);
        return true;
      },
      stack,
      200,
    );
  } catch (err) {
    await stack.stop().catch((stopErr: Error) => ((err as Error).message += `\nand stopping it: ${stopErr.message}`));
    throw err;
  }
  ready = true;
  return stack;
}

function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // no process left in the group
  }
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

/** True when a TCP connection to the port is refused. */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    socket.setTimeout(2_000);
    const accepted = () => {
      socket.destroy();
      resolve(false);
    };
    socket.once("connect", accepted);
    socket.once("timeout", accepted);
    socket.once("error", (err: NodeJS.ErrnoException) => resolve(err.code === "ECONNREFUSED"));
  });
}

/** Who holds a listening TCP socket on the port (pid and command), for a failure message. */
function portOwners(port: number): string[] {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    try {
      for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
        const f = line.trim().split(/\s+/);
        if (f[1]?.endsWith(`:${port.toString(16).toUpperCase().padStart(4, "0")}`) && f[3] === "0A") inodes.add(f[9]!);
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
          owners.push(
            `${pid} (pgrp ${readStat(`/proc/${pid}/stat`)?.pgrp}): ${readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ").slice(0, 160)}`,
          );
          break;
        }
      }
    } catch {}
  }
  return owners.length > 0 ? owners : [`listening socket(s) ${[...inodes].join(", ")}, owner not found`];
}
