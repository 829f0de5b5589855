// Where the local stack's CPU goes: a V8 sampling profile of the Worker taken through wrangler's
// inspector (`--inspector-port`, which scripts/start.mjs sets from INSPECTOR_PORT), summed by the
// part of edgecron each sample belongs to. Locally one workerd thread runs the API, every shard and
// the queue consumer, so the time one run costs each part is what says how far one shard (a
// single-threaded object on Cloudflare) and one consumer invocation can go (docs/sizing-and-throughput.md, "On Cloudflare, on paper").
//
// Written by hand because nothing on npm reads a CPU profile this way: the Chrome DevTools
// protocol itself is three calls (Profiler.enable/start/stop), and the attribution is the point.

import { writeFileSync } from "node:fs";

/** The part of edgecron a sample is charged to: the innermost frame of our own code on its stack. */
export type Part = "shard" | "consumer" | "api" | "sweep" | "other";

export interface CpuBreakdown {
  /** Wall time the profile covered. */
  profiledMs: number;
  /**
   * The time the samples stand for, by part (each sample at most two sampling intervals): the
   * isolate's busy time; its idle time apart.
   */
  msByPart: Record<Part, number>;
  idleMs: number;
  /** Garbage collection and V8's own work, which no frame of ours owns. */
  runtimeMs: number;
  /** The modules (bundle sections) that took the most CPU, innermost own frame. */
  topModules: Array<{ module: string; ms: number }>;
}

export interface CpuProfiler {
  /** Stops sampling; the raw profile goes to `rawPath` (a .cpuprofile file Chrome DevTools opens). */
  stop(rawPath?: string): Promise<CpuBreakdown>;
}

interface CallFrame {
  functionName: string;
  scriptId: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** Starts sampling every `intervalUs` µs. The inspector must allow a local client (Origin: localhost). */
export async function startCpuProfile(inspectorPort: number, intervalUs = 500): Promise<CpuProfiler> {
  const targets = (await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json()) as Array<{ webSocketDebuggerUrl: string }>;
  const url = targets[0]?.webSocketDebuggerUrl;
  if (!url) throw new Error(`no inspector target on port ${inspectorPort}`);
  // wrangler's inspector proxy refuses a client without an Origin it knows (undici's WebSocket takes headers).
  const init = { headers: { Origin: "http://localhost" } } as unknown as string[];
  const ws = new WebSocket(url, init);
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error(`cannot connect to the inspector at ${url}`));
  });
  let nextId = 0;
  const pending = new Map<number, { resolve: (r: unknown) => void; reject: (e: Error) => void }>();
  ws.onmessage = (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string } };
    const waiter = message.id === undefined ? undefined : pending.get(message.id);
    if (!waiter || message.id === undefined) return;
    pending.delete(message.id);
    if (message.error) waiter.reject(new Error(message.error.message));
    else waiter.resolve(message.result);
  };
  const call = <T>(method: string, params: object = {}) =>
    new Promise<T>((resolve, reject) => {
      const id = ++nextId;
      pending.set(id, { resolve: resolve as (r: unknown) => void, reject });
      ws.send(JSON.stringify({ id, method, params }));
    });

  await call("Profiler.enable");
  await call("Profiler.setSamplingInterval", { interval: intervalUs });
  await call("Profiler.start");
  return {
    async stop(rawPath) {
      try {
        const { profile } = await call<{ profile: Profile }>("Profiler.stop");
        if (rawPath) writeFileSync(rawPath, JSON.stringify(profile));
        await call("Debugger.enable");
        const sections = new Map<string, Section[]>();
        for (const scriptId of new Set(profile.nodes.map((n) => n.callFrame.scriptId))) {
          if (scriptId === "0") continue;
          const source = await call<{ scriptSource: string }>("Debugger.getScriptSource", { scriptId }).catch(() => null);
          if (source) sections.set(scriptId, bundleSections(source.scriptSource));
        }
        return attribute(profile, sections, intervalUs);
      } finally {
        ws.close();
      }
    },
  };
}

/** A module's place in the bundle: esbuild starts each with a `// path` comment line. */
interface Section {
  fromLine: number;
  module: string;
}

export function bundleSections(source: string): Section[] {
  const sections: Section[] = [];
  source.split("\n").forEach((line, i) => {
    const match = /^\/\/ ((?:src|node_modules)\/\S+\.[cm]?[jt]sx?)$/.exec(line);
    if (match) sections.push({ fromLine: i, module: match[1]! });
  });
  return sections;
}

function moduleAt(sections: Section[] | undefined, line: number): string | null {
  if (!sections) return null;
  let found: string | null = null;
  for (const s of sections) {
    if (s.fromLine > line) break;
    found = s.module;
  }
  return found;
}

const IDLE = new Set(["(idle)"]);
const RUNTIME = new Set(["(garbage collector)", "(program)"]);

export function partOf(module: string): Part | null {
  if (module.startsWith("src/shard/")) return "shard";
  if (module.startsWith("src/consumer/") || module === "src/queues.ts") return "consumer";
  if (module.startsWith("src/reconcile/")) return "sweep";
  if (/^src\/(api|app|catalog|gate)\//.test(module) || module.startsWith("node_modules/hono") || module.startsWith("node_modules/@hono"))
    return "api";
  return null;
}

/**
 * Each sample goes to the innermost frame on its stack that belongs to a part. A sample stands
 * for the time since the one before, at most two intervals: workerd lets the sampler in only
 * while the isolate runs, so a gap of seconds is time the isolate was not running at all, which
 * the first sample after it would otherwise be charged with.
 */
export function attribute(profile: Profile, sections: Map<string, Section[]>, intervalUs: number): CpuBreakdown {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const owner = new Map<number, { part: Part; module: string } | "idle" | "runtime">();
  const ownerOf = (id: number) => {
    const known = owner.get(id);
    if (known) return known;
    const name = byId.get(id)?.callFrame.functionName ?? "";
    let found: { part: Part; module: string } | "idle" | "runtime" = IDLE.has(name)
      ? "idle"
      : RUNTIME.has(name)
        ? "runtime"
        : { part: "other", module: "(none)" };
    if (typeof found !== "string") {
      for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
        const frame = byId.get(cur)!.callFrame;
        const module = moduleAt(sections.get(frame.scriptId), frame.lineNumber);
        const part = module === null ? null : partOf(module);
        if (module !== null && part !== null) {
          found = { part, module };
          break;
        }
        if (module !== null && found.module === "(none)") found = { part: "other", module };
      }
    }
    owner.set(id, found);
    return found;
  };
  const msByPart: Record<Part, number> = { shard: 0, consumer: 0, api: 0, sweep: 0, other: 0 };
  const msByModule = new Map<string, number>();
  let idleMs = 0;
  let runtimeMs = 0;
  profile.samples.forEach((id, i) => {
    const ms = Math.min(profile.timeDeltas[i] ?? 0, 2 * intervalUs) / 1000;
    const o = ownerOf(id);
    if (o === "idle") idleMs += ms;
    else if (o === "runtime") runtimeMs += ms;
    else {
      msByPart[o.part] += ms;
      msByModule.set(o.module, (msByModule.get(o.module) ?? 0) + ms);
    }
  });
  const topModules = [...msByModule]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 12)
    .map(([module, ms]) => ({ module, ms: Math.round(ms) }));
  const round = (x: number) => Math.round(x);
  return {
    profiledMs: round((profile.endTime - profile.startTime) / 1000),
    msByPart: Object.fromEntries(Object.entries(msByPart).map(([k, v]) => [k, round(v)])) as Record<Part, number>,
    idleMs: round(idleMs),
    runtimeMs: round(runtimeMs),
    topModules,
  };
}
