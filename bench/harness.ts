/**
 * What every system measured shares (bench/README.md): the workload's shape, the calibration,
 * the choice of T, creation, the wait, and the result's common part. The systems (edgecron.ts,
 * bullmq.ts) only say how one job or schedule is made on them.
 */
import { spawnSync } from "node:child_process";
import { cpus, loadavg, totalmem } from "node:os";
import { relative } from "node:path";
import { fileURLToPath } from "node:url";
import type { Options, System } from "./options.ts";
import { type CpuMs, type CpuSnapshot, cpuBetween, cpuSum, type Group, groupsCpu, workerdTotal } from "./process-cpu.ts";
import type { Receiver } from "./receiver.ts";
import type { Result } from "./result.ts";
import { round, summarize } from "./stats.ts";
import { pairCounter, type SteadyWindow } from "./steady.ts";

export const ROOT = fileURLToPath(new URL("..", import.meta.url));
export const HOST = "127.0.0.1";
export const iso = (ms: number) => new Date(ms).toISOString();
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const DAY_MS = 86_400_000;
/** The steady workload's schedule: every whole second (6 fields, seconds first). */
export const STEADY_CRON = "* * * * * *";

/**
 * The end bound given to a steady schedule: half a second after its last second, so that the
 * last second is due whether a scheduler's end bound is inclusive or exclusive, and the next
 * one is not.
 */
export const steadyEndMs = (T: number, seconds: number) => T + (seconds - 1) * 1_000 + 500;

/** What a system's run is given by bench.ts. */
export interface SystemContext {
  opts: Options;
  /** When the bench started: results and logs are stamped from it. */
  t0: number;
  say(message: string): void;
  /** Where this system's JSON and log go, without the extension. */
  pathBase: string;
  /** Aborted on the first SIGINT/SIGTERM. */
  interrupt: AbortSignal;
  /** Registers a stop to run on the first SIGINT/SIGTERM (once, never throwing); returns its removal. */
  onInterrupt(stop: () => Promise<void>): () => void;
}

/** Rate-limit refusals a system's calls waited out and made again, and the time spent waiting. */
export interface Throttled {
  refusals: number;
  waitedMs: number;
}

/** One system's run, as the shared steps see it. */
export interface Harness {
  receiver: Receiver;
  opts: Options;
  result: Result;
  say(message: string): void;
  /** Why the system can no longer run (it died, or the bench was interrupted), or null. */
  failure(): string | null;
  /** The system's running count of refusals waited out (edgecron's tenant: 429 with Retry-After), if it has a limit. */
  throttled?: Throttled;
}

/** Runs `count` tasks with at most `limit` in flight; `task(i)` must not throw. Stops early when `stop()` says so. */
export async function pool(count: number, limit: number, task: (i: number) => Promise<void>, stop: () => boolean = () => false) {
  let next = 0;
  const worker = async () => {
    while (next < count && !stop()) {
      const i = next;
      next++;
      await task(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  return next;
}

function gitState(): { commit: string | null; uncommittedChanges: string[] | null } {
  const git = (...args: string[]) => {
    const r = spawnSync("git", args, { cwd: ROOT, encoding: "utf8", timeout: 10_000 });
    return r.status === 0 ? r.stdout.trim() : null;
  };
  const dirty = git("status", "--porcelain", "--", "src", "scripts", "migrations", "wrangler.toml", "package.json");
  return { commit: git("rev-parse", "HEAD"), uncommittedChanges: dirty === null ? null : dirty.split("\n").filter(Boolean) };
}

export function newResult(system: System, ctx: SystemContext, logPath: string, stackEnv: Record<string, string> = {}): Result {
  return {
    system,
    workload: ctx.opts.workload,
    formatVersion: 3,
    startedAt: iso(Date.now()),
    options: ctx.opts,
    environment: {
      node: process.version,
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? null,
      totalMemMb: Math.round(totalmem() / 2 ** 20),
      loadavgAtStart: loadavg().map((x) => round(x, 2)),
      stackEnv,
    },
    logPath: relative(ROOT, logPath),
    harness: { ok: false, error: null },
    code: gitState(),
  };
}

/** How many jobs (burst) or schedules (steady) the run creates. */
const countOf = (opts: Options) => (opts.workload === "burst" ? opts.jobs : opts.schedules);
/** The receiver's path of job or schedule i. */
export const pathOf = (opts: Options, i: number) => `/${opts.workload}/${i}`;
/** The steady window of a run whose first second is T. */
export const windowOf = (opts: Options, T: number): SteadyWindow => ({ T, seconds: opts["duration-s"] });

/** One item a system was asked to create: its id, or why not; `nextMismatch`: the first instant it reported is not T. */
export type Made = { id: string; nextMismatch: boolean } | { id?: undefined; error: string };
export type Created = { id: string; createdAt: number; ms: number } | { id?: undefined; error: string } | null;

/**
 * Makes `count` items in calls of up to `per` items, `concurrency` calls in flight. `call(from,
 * to)` makes items from … to − 1 and says what became of each; it may throw, which fails all of
 * them. Failures are counted, never retried: a retry of a call that did reach the system would
 * make a second item for the same index. A rate-limit refusal is no failure: the system's call
 * waits it out and asks again (nothing was made), and `throttled` counts it.
 */
async function makeAll(
  h: Harness,
  count: number,
  per: number,
  call: (from: number, to: number) => Promise<Made[]>,
  stop: () => boolean,
  onCall?: (done: number, failed: number, started: number) => void,
) {
  const items: Created[] = new Array<Created>(count).fill(null);
  const failures = new Map<string, number>();
  const throttledBefore = { ...(h.throttled ?? { refusals: 0, waitedMs: 0 }) };
  let created = 0;
  let failed = 0;
  let nextMismatch = 0;
  const started = Date.now();
  const calls = Math.ceil(count / per);
  const attemptedCalls = await pool(
    calls,
    h.opts.concurrency,
    async (c) => {
      const from = c * per;
      const to = Math.min(count, from + per);
      const callStarted = performance.now();
      let made: Made[];
      try {
        made = await call(from, to);
      } catch (err) {
        const e = err instanceof Error ? err : new Error(String(err));
        made = Array.from({ length: to - from }, () => ({ error: `${e.name}: ${e.message}` }));
      }
      const now = Date.now();
      const ms = performance.now() - callStarted;
      for (let i = from; i < to; i++) {
        const m = made[i - from] ?? { error: "no answer for this item" };
        if (m.id !== undefined) {
          items[i] = { id: m.id, createdAt: now, ms };
          created++;
          if (m.nextMismatch) nextMismatch++;
        } else {
          items[i] = { error: m.error };
          failed++;
          const key = m.error.startsWith("HTTP ") ? m.error : m.error.split(":")[0]!;
          failures.set(key, (failures.get(key) ?? 0) + 1);
        }
      }
      onCall?.(created, failed, started);
    },
    stop,
  );
  const throttled = h.throttled
    ? { refusals: h.throttled.refusals - throttledBefore.refusals, waitedMs: Math.round(h.throttled.waitedMs - throttledBefore.waitedMs) }
    : null;
  return {
    items,
    created,
    failed,
    nextMismatch,
    failures,
    attempted: Math.min(count, attemptedCalls * per),
    started,
    ended: Date.now(),
    throttled,
  };
}

/** How a system removes items it made for the bench alone: `call(ids)` says, for each, whether it is gone. */
export type Remove = (ids: readonly string[]) => Promise<boolean[]>;

/**
 * Removes the warm-up or calibration items, `per` to a call, `concurrency` calls in flight, so
 * that only the workload's items are there at T, on every system alike (and a tenant's maxJobs
 * holds the workload's N). Records what became of them; a failure is reported, not retried.
 */
async function removeAll(h: Harness, items: readonly Created[], per: number, remove: Remove) {
  const ids = items.flatMap((j) => (j?.id ? [j.id] : []));
  const started = performance.now();
  let removed = 0;
  const errors: string[] = [];
  await pool(
    Math.ceil(ids.length / per),
    h.opts.concurrency,
    async (c) => {
      const chunk = ids.slice(c * per, (c + 1) * per);
      try {
        const gone = await remove(chunk);
        removed += gone.filter(Boolean).length;
      } catch (err) {
        if (errors.length < 5) errors.push(err instanceof Error ? err.message : String(err));
      }
    },
    () => h.failure() !== null,
  );
  return { removed, failed: ids.length - removed, seconds: round((performance.now() - started) / 1000, 3), errors };
}

/** The warm-up jobs are due this long after their create call. */
const WARMUP_DELAY_MS = 1_000;
/** How long after the last warm-up job is due the bench waits for warm-up receipts. */
const WARMUP_WAIT_MS = 60_000;
/** How long after the last warm-up receipt the bench waits before removing the warm-up jobs. */
const WARMUP_SETTLE_MS = 1_000;

/**
 * The same warm-up on every system (and the floor): W one-off jobs on /warmup/<i>, each due a
 * second after its create call, made the way the workload's are, fired and received, then
 * removed. Creation alone warms the API; this warms the path from due to call (timers or
 * alarms, the queue, the worker or consumer, its HTTP client) before T. `call(from, to, at)`
 * makes warm-up items from … to − 1 due at `at`.
 */
export async function warmUp(h: Harness, per: number, call: (from: number, to: number, at: number) => Promise<Made[]>, remove: Remove) {
  const { opts, receiver, result, say } = h;
  const W = opts.warmup;
  if (W === 0) return;
  const made = await makeAll(
    h,
    W,
    per,
    (from, to) => call(from, to, Date.now() + WARMUP_DELAY_MS),
    () => h.failure() !== null,
  );
  const expected = createdIndexes(made.items);
  const deadline = Date.now() + WARMUP_DELAY_MS + WARMUP_WAIT_MS;
  const arrived = () => {
    const got = new Set<number>();
    for (const r of receiver.receipts) if (r.kind === "warmup" && r.index !== null && expected.has(r.index)) got.add(r.index);
    return got.size;
  };
  while (arrived() < expected.size && Date.now() < deadline && h.failure() === null) await sleep(50);
  const received = arrived();
  // A call is received before the system records its end (BullMQ cannot remove a job still active).
  await sleep(WARMUP_SETTLE_MS);
  const removal = await removeAll(h, made.items, per, remove);
  result.warmup = {
    jobs: W,
    created: made.created,
    failed: made.failed,
    received,
    creationSeconds: round((made.ended - made.started) / 1000, 3),
    throttled: made.throttled,
    removal,
  };
  say(
    `warm-up: ${made.created}/${W} one-off jobs created, ${received} received; ${removal.removed} removed${removal.failed ? `, ${removal.failed} not` : ""}`,
  );
}

/**
 * The creation rate, measured on `calibration` items of the workload's shape due in 7 days,
 * which are removed once measured. `call(from, to, at)` makes items from … to − 1 due at `at`.
 */
export async function calibrate(
  h: Harness,
  per: number,
  call: (from: number, to: number, at: number) => Promise<Made[]>,
  remove: Remove,
): Promise<number> {
  const { opts, result, say } = h;
  const C = opts.calibration;
  if (C === 0) {
    const rate = 200; // a guess; --calibration 0 is for debugging only
    result.calibration = { jobs: 0, assumedJobsPerSecond: rate };
    return rate;
  }
  // On a whole second, as a steady schedule's T is.
  const far = Math.ceil((Date.now() + 7 * DAY_MS) / 1_000) * 1_000;
  const started = performance.now();
  const made = await makeAll(
    h,
    C,
    per,
    (from, to) => call(from, to, far),
    () => h.failure() !== null,
  );
  const seconds = (performance.now() - started) / 1000;
  if (made.created === 0) throw new Error(`no calibration job could be created: ${JSON.stringify(Object.fromEntries(made.failures))}`);
  const rate = made.created / seconds;
  const removal = await removeAll(h, made.items, per, remove);
  result.calibration = {
    jobs: C,
    created: made.created,
    seconds: round(seconds, 3),
    jobsPerSecond: round(rate),
    throttled: made.throttled,
    removal,
  };
  say(
    `calibration: ${made.created}/${C} in ${seconds.toFixed(2)} s = ${rate.toFixed(0)} /s${made.throttled?.refusals ? ` (${made.throttled.refusals} rate-limit refusals waited out)` : ""}; ${removal.removed} removed${removal.failed ? `, ${removal.failed} not` : ""} in ${removal.seconds} s`,
  );
  return rate;
}

/** T: the end of creation as estimated from `rate`, with the safety factor and the margin; steady: the next whole second. */
export function chooseT({ opts, result, say }: Harness, rate: number): number {
  const N = countOf(opts);
  const chosenAt = Date.now();
  const estimateMs = Math.ceil((N / rate) * 1000);
  const earliest = chosenAt + Math.ceil(estimateMs * opts.safety) + opts["margin-ms"];
  const T = opts.workload === "steady" ? Math.ceil(earliest / 1_000) * 1_000 : earliest;
  result.schedule = {
    T: iso(T),
    TEpochMs: T,
    chosenAt: iso(chosenAt),
    estimatedCreationMs: estimateMs,
    safety: opts.safety,
    marginMs: opts["margin-ms"],
    leadMs: T - chosenAt,
  };
  if (opts.workload === "steady") {
    result.schedule.lastSecond = iso(T + (opts["duration-s"] - 1) * 1_000);
    result.schedule.endBound = iso(steadyEndMs(T, opts["duration-s"]));
  }
  say(
    `T = ${iso(T)} (in ${((T - chosenAt) / 1000).toFixed(1)} s: ${N} ${opts.workload === "burst" ? "jobs" : "schedules"} at ~${rate.toFixed(0)}/s × ${opts.safety} + ${opts["margin-ms"]} ms)`,
  );
  return T;
}

/** Makes the run's N jobs or S schedules, all first due at T, and records result.creation. */
export async function createAll(
  h: Harness,
  T: number,
  per: number,
  call: (from: number, to: number) => Promise<Made[]>,
): Promise<Created[]> {
  const { opts, result, say } = h;
  const N = countOf(opts);
  const what = opts.workload === "burst" ? "jobs" : "schedules";
  const deadline = T + opts["timeout-ms"];
  let lastProgress = Date.now();
  const made = await makeAll(
    h,
    N,
    per,
    call,
    () => h.failure() !== null || Date.now() > deadline,
    (created, failed, started) => {
      const now = Date.now();
      if (now - lastProgress < 5_000) return;
      lastProgress = now;
      say(
        `created ${created}/${N} ${what} (${failed} failed), ${((created * 1000) / (now - started)).toFixed(0)}/s, T ${now < T ? "in" : "passed"} ${(Math.abs(T - now) / 1000).toFixed(1)} s`,
      );
    },
  );
  const { items, created, failed, started, ended } = made;
  const ok = items.flatMap((j) => (j?.id ? [j] : []));
  const createdAfterT = ok.filter((j) => j.createdAt > T).length;
  result.creation = {
    attempted: made.attempted,
    created,
    failed,
    notAttempted: N - made.attempted,
    failures: Object.fromEntries(made.failures),
    seconds: round((ended - started) / 1000, 3),
    jobsPerSecond: round((created * 1000) / Math.max(1, ended - started)),
    itemsPerCall: per,
    requestMs: summarize(ok.map((j) => round(j.ms) ?? 0)),
    endedAt: iso(ended),
    slackMs: T - ended,
    createdAfterT,
    nextRunAtMismatch: made.nextMismatch,
    throttled: made.throttled,
  };
  say(
    `created ${created}/${N} ${what} in ${result.creation.seconds} s = ${result.creation.jobsPerSecond}/s (${failed} failed${made.throttled ? `, ${made.throttled.refusals} rate-limit refusals waited out` : ""}); ` +
      (ended <= T
        ? `finished ${((T - ended) / 1000).toFixed(1)} s before T`
        : `LATE: finished ${((ended - T) / 1000).toFixed(1)} s after T, ${createdAfterT} created after T`),
  );
  return items;
}

/** The indexes whose creation succeeded: the jobs (burst) or schedules (steady) expected to fire. */
export const createdIndexes = (items: readonly Created[]) => new Set(items.flatMap((j, i) => (j?.id ? [i] : [])));

/**
 * Waits until everything expected has arrived, then `settle-ms` more for duplicates, or until
 * the deadline: burst, T + `timeout-ms`; steady, the last second + `timeout-ms`. Returns when it
 * stopped and whether everything had arrived; throws if the system fails meanwhile.
 */
export async function waitForRuns(h: Harness, T: number, created: ReadonlySet<number>): Promise<{ ended: number; complete: boolean }> {
  const { opts, receiver, say } = h;
  let expected: number;
  let received: () => number;
  let deadline: number;
  let lastDue = T;
  if (opts.workload === "burst") {
    expected = created.size;
    received = () => {
      // Cheap test first: the set check only runs once enough distinct jobs have arrived.
      if (receiver.firstReceipt.size < expected) return receiver.firstReceipt.size;
      let n = 0;
      for (const i of created) if (receiver.firstReceipt.has(i)) n++;
      return n;
    };
    deadline = T + opts["timeout-ms"];
  } else {
    const w = windowOf(opts, T);
    expected = created.size * w.seconds;
    const count = pairCounter(created, w);
    received = () => count(receiver.receipts);
    lastDue = T + (w.seconds - 1) * 1_000;
    deadline = lastDue + opts["timeout-ms"];
  }
  const unit = opts.workload === "burst" ? "runs" : "(schedule, second) pairs";
  let lastReport = Date.now();
  for (;;) {
    const now = Date.now();
    if (received() >= expected) break;
    if (now > deadline) {
      say(`timeout: ${opts["timeout-ms"]} ms after the last instant due, ${received()}/${expected} ${unit} received`);
      break;
    }
    const failure = h.failure();
    if (failure) throw new Error(`while runs were due: ${failure}`);
    if (now - lastReport >= 5_000) {
      lastReport = now;
      say(
        now < T
          ? `waiting for T (${((T - now) / 1000).toFixed(1)} s)`
          : `received ${received()}/${expected} ${unit}, T+${((now - T) / 1000).toFixed(1)} s${now < lastDue ? ` (last second at T+${((lastDue - T) / 1000).toFixed(0)} s)` : ""}`,
      );
    }
    await sleep(50);
  }
  const complete = received() >= expected;
  if (complete) {
    say(`all ${expected} ${unit} arrived; listening ${opts["settle-ms"]} ms more for duplicates`);
    const until = Date.now() + opts["settle-ms"];
    while (Date.now() < until && h.failure() === null) await sleep(100);
  }
  return { ended: Date.now(), complete };
}

/** Receipts that belong to no job or schedule of the workload (the steady figures do not see them). */
export const otherReceipts = (receiver: Receiver) => ({
  calibrationFires: receiver.receipts.filter((r) => r.kind === "calibration").length,
  unknownPaths: receiver.receipts.filter((r) => r.kind === "unknown").length,
});

/** The CPU measurement starts this long before T, on every system. */
export const CPU_LEAD_MS = 500;

/** Seconds between the CPU samples taken during the wait, which can end the window early. */
const CPU_SAMPLE_MS = 1_000;

export interface CpuWindowEnd {
  /** When the window ended, epoch ms. */
  until: number;
  after: CpuSnapshot | null;
  /** Why then. */
  end: string;
}

/**
 * The CPU window of every system: from T − CPU_LEAD_MS (not from the end of creation: the
 * idle wait for T would be charged to the runs) to the end of the wait, which is the last
 * receipt + `settleMs` when everything arrived. When the wait ran on to its timeout because some
 * fires never came, the window still ends at the last receipt + `settleMs` (the first sample
 * after it): minutes of waiting for fires that never come are no system's work, and would weigh
 * on the one that missed them. `before` resolves with the groups' CPU at the start.
 */
export function cpuWindow(T: number, groups: readonly Group[], settleMs: number) {
  const from = T - CPU_LEAD_MS;
  const samples: Array<{ at: number; cpu: CpuSnapshot | null }> = [];
  let timer: ReturnType<typeof setInterval> | undefined;
  let stopped = false;
  const before = (async () => {
    await sleep(Math.max(0, from - Date.now()));
    const first = groupsCpu(groups);
    if (!stopped) {
      timer = setInterval(() => samples.push({ at: Date.now(), cpu: groupsCpu(groups) }), CPU_SAMPLE_MS);
      timer.unref();
    }
    return first;
  })();
  /** Ends the window now, at the end of the wait, or, when not everything arrived (`complete` false), as above. */
  const end = (receiver: Receiver, complete: boolean): CpuWindowEnd => {
    stopped = true;
    clearInterval(timer);
    const now = Date.now();
    let last = -Infinity;
    for (const r of receiver.receipts) if ((r.kind === "burst" || r.kind === "steady") && r.t >= from) last = Math.max(last, r.t);
    const early = Number.isFinite(last) ? last + settleMs : now;
    const sample = complete ? undefined : samples.find((x) => x.at >= early);
    if (sample && sample.at < now)
      return { until: sample.at, after: sample.cpu, end: `the last call received + ${settleMs / 1000} s (the wait ran on to its timeout)` };
    return { until: now, after: groupsCpu(groups), end: "the end of the wait" };
  };
  return { from, before, end };
}

const perCall = (ms: CpuMs, calls: number): CpuMs => ({
  user: Math.round((ms.user / calls) * 1000) / 1000,
  system: Math.round((ms.system / calls) * 1000) / 1000,
});

/** result.cpu: the CPU of the window, by process and per call received in it, every process counted. */
export function cpuFigures(receiver: Receiver, T: number, from: number, before: CpuSnapshot | null, end: CpuWindowEnd): Result["cpu"] {
  if (!before || !end.after) return undefined;
  const msByProcess = cpuBetween(before, end.after);
  const calls = receiver.receipts.filter((r) => r.t >= from && r.t <= end.until).length;
  const workerd = workerdTotal(msByProcess);
  return {
    window: `T − 0.5 s → ${end.end}, T+${((end.until - T) / 1000).toFixed(1)} s`,
    calls,
    msByProcess,
    allMs: cpuSum(msByProcess),
    msPerRunByProcess: calls === 0 ? null : Object.fromEntries(Object.entries(msByProcess).map(([name, ms]) => [name, perCall(ms, calls)])),
    allMsPerRun: calls === 0 ? null : perCall(cpuSum(msByProcess), calls),
    workerdMsPerRun: calls === 0 || !workerd ? null : perCall(workerd, calls),
  };
}
