// CPU time a system's processes used, read from /proc (Linux only): what a run costs the machine,
// without a profiler's overhead, measured the same way for every system over the same window.
// edgecron: workerd is the process that runs edgecron's code: with --topology two, one workerd
// runs the scheduler (the API and every shard) and another the runner (the queue consumer), each
// on one thread; with one, one workerd runs both. wrangler's node process only proxies requests
// to it and prints its log. Each process is named by its command and by the Worker configs of the
// `wrangler dev` it belongs to, e.g. "workerd (runner)". The BullMQ peer: redis-server and each
// worker process, by the name the bench gives its process group.
//
// A process that ended inside the window (redis' AOF rewrite is a fork) is gone from the second
// snapshot; its parent's children times (cutime, cstime) hold it once the parent has waited for
// it, so they are counted too, as "<group> ended children".
import { readdirSync, readFileSync } from "node:fs";

/** Clock ticks per second of /proc's utime and stime: USER_HZ, 100 on every Linux build in use. */
const TICKS_PER_SECOND = 100;

/** CPU ms in user space and in the kernel (system calls: I/O, fsync, networking). */
export interface CpuMs {
  user: number;
  system: number;
}

export interface CpuSnapshot {
  /** CPU ms by command name and Worker (see processName), summed over the group's live processes. */
  msByCommand: Record<string, CpuMs>;
}

/** The Workers of the configs a `wrangler dev` was started with (scripts/dev-topology.ts). */
const WORKER_OF_CONFIG: Record<string, string> = {
  "wrangler.toml": "scheduler",
  "runner/wrangler.toml": "runner",
  "bench/floor/wrangler.toml": "floor tickers",
  "bench/floor/runner.toml": "floor runner",
};

interface ProcessInfo {
  comm: string;
  ppid: number;
  pgrp: number;
  utime: number;
  stime: number;
  cutime: number;
  cstime: number;
}

/** The Workers a process serves: those of the nearest `wrangler dev` at or above it, by its -c arguments; null outside any. */
function workersOf(pid: number, processes: Map<number, ProcessInfo>): string | null {
  for (let at: number | undefined = pid, hops = 0; at !== undefined && at > 1 && hops < 10; at = processes.get(at)?.ppid, hops++) {
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${at}/cmdline`, "utf8").split("\0");
    } catch {
      return null;
    }
    if (!argv.includes("dev")) continue;
    const configs = argv.flatMap((a, i) => (argv[i - 1] === "-c" ? [WORKER_OF_CONFIG[a] ?? a] : []));
    if (configs.length > 0) return configs.join("+");
  }
  return null;
}

/** "workerd (runner)", "workerd (scheduler+runner)"; a process outside any `wrangler dev` (start.mjs) by its command alone. */
function processName(pid: number, processes: Map<number, ProcessInfo>): string {
  const comm = processes.get(pid)!.comm;
  const workers = workersOf(pid, processes);
  return workers === null ? comm : `${comm} (${workers})`;
}

function readProcesses(): Map<number, ProcessInfo> | null {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return null;
  }
  const processes = new Map<number, ProcessInfo>();
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    // After "pid (comm) ": state is field 3, ppid 4, pgrp 5, utime 14, stime 15, cutime 16, cstime 17 (proc(5)).
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    processes.set(Number(entry), {
      comm,
      ppid: Number(fields[1]),
      pgrp: Number(fields[2]),
      utime: Number(fields[11]),
      stime: Number(fields[12]),
      cutime: Number(fields[13]),
      cstime: Number(fields[14]),
    });
  }
  return processes;
}

const add = (into: Record<string, CpuMs>, name: string, userTicks: number, systemTicks: number) => {
  const sum = into[name] ?? { user: 0, system: 0 };
  into[name] = sum;
  sum.user += (userTicks * 1000) / TICKS_PER_SECOND;
  sum.system += (systemTicks * 1000) / TICKS_PER_SECOND;
};

/** One process group to measure: edgecron's stack (its processes named by command and Worker), or one named by `label`. */
export interface Group {
  pgid: number;
  label?: string;
}

/** The CPU ms of every process in the groups so far; null where /proc is not there. */
export function groupsCpu(groups: readonly Group[]): CpuSnapshot | null {
  const processes = readProcesses();
  if (!processes) return null;
  const msByCommand: Record<string, CpuMs> = {};
  for (const { pgid, label } of groups) {
    let endedUser = 0;
    let endedSystem = 0;
    for (const [pid, p] of processes) {
      if (p.pgrp !== pgid) continue;
      const name = label === undefined ? processName(pid, processes) : pid === pgid ? label : `${label}: ${p.comm}`;
      add(msByCommand, name, p.utime, p.stime);
      endedUser += p.cutime;
      endedSystem += p.cstime;
    }
    add(msByCommand, `${label ?? "stack"} ended children`, endedUser, endedSystem);
  }
  return { msByCommand };
}

/** The CPU ms of every process in group `pgid` so far; null where /proc is not there. */
export const groupCpu = (pgid: number): CpuSnapshot | null => groupsCpu([{ pgid }]);

/** CPU ms each command used between two snapshots. */
export function cpuBetween(before: CpuSnapshot, after: CpuSnapshot): Record<string, CpuMs> {
  const used: Record<string, CpuMs> = {};
  for (const [comm, ms] of Object.entries(after.msByCommand)) {
    const was = before.msByCommand[comm] ?? { user: 0, system: 0 };
    used[comm] = { user: Math.max(0, ms.user - was.user), system: Math.max(0, ms.system - was.system) };
  }
  return used;
}

/** The sum of some processes' CPU. */
export const cpuSum = (used: Record<string, CpuMs>, keep: (name: string) => boolean = () => true): CpuMs =>
  Object.entries(used)
    .filter(([name]) => keep(name))
    .reduce((sum, [, ms]) => ({ user: sum.user + ms.user, system: sum.system + ms.system }), { user: 0, system: 0 });

/** The CPU of every workerd process together: all of edgecron's code, whatever the topology. */
export function workerdTotal(used: Record<string, CpuMs>): CpuMs | null {
  const workerd = Object.entries(used).filter(([name]) => name === "workerd" || name.startsWith("workerd "));
  if (workerd.length === 0) return null;
  return workerd.reduce((sum, [, ms]) => ({ user: sum.user + ms.user, system: sum.system + ms.system }), { user: 0, system: 0 });
}
