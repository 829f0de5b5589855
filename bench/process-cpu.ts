// CPU time the stack's processes used, read from /proc (Linux only): what a run costs the machine,
// without a profiler's overhead. workerd is the process that runs edgecron's code (the API, every
// shard and the queue consumer, on one thread); wrangler's node process only proxies requests
// to it and prints its log.
import { readdirSync, readFileSync } from "node:fs";

/** Clock ticks per second of /proc's utime and stime: USER_HZ, 100 on every Linux build in use. */
const TICKS_PER_SECOND = 100;

/** CPU ms in user space and in the kernel (system calls: I/O, fsync, networking). */
export interface CpuMs {
  user: number;
  system: number;
}

export interface CpuSnapshot {
  /** CPU ms by command name, summed over the group's live processes. */
  msByCommand: Record<string, CpuMs>;
}

/** The CPU ms of every process in group `pgid` so far; null where /proc is not there. */
export function groupCpu(pgid: number): CpuSnapshot | null {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return null;
  }
  const msByCommand: Record<string, CpuMs> = {};
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    // After "pid (comm) ": state is field 3, pgrp field 5, utime 14, stime 15 (proc(5)).
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[2]) !== pgid) continue;
    const sum = msByCommand[comm] ?? { user: 0, system: 0 };
    msByCommand[comm] = sum;
    sum.user += (Number(fields[11]) * 1000) / TICKS_PER_SECOND;
    sum.system += (Number(fields[12]) * 1000) / TICKS_PER_SECOND;
  }
  return { msByCommand };
}

/** CPU ms each command used between two snapshots. */
export function cpuBetween(before: CpuSnapshot, after: CpuSnapshot): Record<string, CpuMs> {
  const used: Record<string, CpuMs> = {};
  for (const [comm, ms] of Object.entries(after.msByCommand)) {
    const was = before.msByCommand[comm] ?? { user: 0, system: 0 };
    used[comm] = { user: Math.max(0, ms.user - was.user), system: Math.max(0, ms.system - was.system) };
  }
  return used;
}
