/**
 * A private redis-server for the BullMQ peer: on a free loopback port, in a temporary
 * directory, in its own process group; stopped with SIGTERM, then SIGKILL, and SIGKILLed if the
 * bench exits while it still runs. Without persistence, or with the AOF on and fsynced every
 * second (`appendfsync: "everysec"`): edgecron commits every run to SQLite, and this is the
 * durability Redis is usually run with for a queue.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { eachLine } from "../test/support/lines.ts";
import { freePort } from "../test/support/local-stack.ts";

export const REDIS_INSTALL = "apt-get install -y redis-server";

/** The redis-server on PATH, or null. */
export function findRedisServer(path = process.env.PATH ?? ""): string | null {
  for (const dir of path.split(delimiter)) {
    if (!dir) continue;
    const file = join(dir, "redis-server");
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {}
  }
  return null;
}

export interface RedisServer {
  readonly port: number;
  readonly pid: number;
  readonly dir: string;
  readonly version: string | null;
  /** How it exited, once it has. */
  readonly exited: { code: number | null; signal: NodeJS.Signals | null } | null;
  /** SIGTERM, SIGKILL after 5 s; removes its directory unless kept. Once only; never throws. */
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function exitOf(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

export async function startRedis(options: {
  binary: string;
  /** null: nothing written to disk; "everysec": appendonly yes, appendfsync everysec, in the temporary directory. */
  appendfsync?: "everysec" | null;
  onLine?: (line: string, stream: "stdout" | "stderr") => void;
  keepDir?: boolean;
  readyTimeoutMs?: number;
}): Promise<RedisServer> {
  const dir = await mkdtemp(join(tmpdir(), "edgecron-bench-redis-"));
  const port = await freePort();
  // No RDB snapshots; the AOF only if asked; noeviction, as BullMQ requires.
  const aof = options.appendfsync ? ["--appendonly", "yes", "--appendfsync", options.appendfsync] : ["--appendonly", "no"];
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", ...aof];
  args.push("--dir", dir, "--daemonize", "no", "--maxmemory-policy", "noeviction");
  const child = spawn(options.binary, args, { cwd: dir, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let exited: RedisServer["exited"] = null;
  let version: string | null = null;
  let ready = false;
  const killOnExit = () => {
    if (exited === null && child.pid) {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {}
    }
  };
  process.on("exit", killOnExit);
  child.on("exit", (code, signal) => {
    exited = { code, signal };
    process.off("exit", killOnExit);
  });
  let spawnError: Error | null = null;
  child.once("error", (err) => {
    spawnError = err;
  });
  eachLine(child, (line, name) => {
    if (/Ready to accept connections/.test(line)) ready = true;
    version ??= /Redis version=([0-9.]+)/.exec(line)?.[1] ?? null;
    options.onLine?.(`[redis] ${line}`, name);
  });

  let stopping: Promise<void> | null = null;
  const server: RedisServer = {
    port,
    get pid() {
      return child.pid ?? -1;
    },
    dir,
    get version() {
      return version;
    },
    get exited() {
      return exited;
    },
    stop() {
      stopping ??= (async () => {
        if (exited === null && spawnError === null && child.pid) {
          try {
            process.kill(-child.pid, "SIGTERM");
          } catch {}
          if (!(await exitOf(child, 5_000))) {
            try {
              process.kill(-child.pid, "SIGKILL");
            } catch {}
            await exitOf(child, 5_000);
          }
        }
        process.off("exit", killOnExit);
        if (!options.keepDir) await rm(dir, { recursive: true, force: true });
      })();
      return stopping;
    },
  };

  const deadline = Date.now() + (options.readyTimeoutMs ?? 10_000);
  while (!ready) {
    const failed = spawnError as Error | null;
    if (failed || exited !== null || Date.now() > deadline) {
      await server.stop();
      throw new Error(
        failed
          ? `could not start ${options.binary}: ${failed.message}`
          : exited !== null
            ? `redis-server exited before it was ready: ${JSON.stringify(exited)} (port ${port} taken?)`
            : `redis-server was not ready after ${options.readyTimeoutMs ?? 10_000} ms`,
      );
    }
    await sleep(20);
  }
  return server;
}
