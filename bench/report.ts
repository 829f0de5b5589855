import type { Result } from "./result.ts";
import { type LagOrMissed, MISSED, type SummaryWithMissed } from "./stats.ts";

const ms = (x: number | null | undefined) => (x === null || x === undefined ? "-" : `${Math.round(x)} ms`);
/** A percentile over every expected fire: a lag, or ∞ where it falls among the missed ones. */
const lagOrMissed = (x: LagOrMissed | null | undefined) => (x === MISSED ? "∞ (missed)" : ms(x));
const cpuMs = (x: { user: number; system: number } | null | undefined, digits = 3) =>
  x ? `${Math.round((x.user + x.system) * 10 ** digits) / 10 ** digits}` : "-";

/** The system's name in the summaries and the table: edgecron by whose its jobs are, BullMQ by its Redis. */
export function labelOf(r: Pick<Result, "system" | "tenant">): string {
  if (r.system === "edgecron") return r.tenant?.as === "admin" ? "edgecron (admin token)" : "edgecron (tenant)";
  return r.system === "bullmq-aof" ? "bullmq + AOF everysec" : "bullmq";
}

/** What the tenant's limits were: each its default, unless the bench set it (and then it says so). */
export function tenantLine(t: NonNullable<Result["tenant"]>): string {
  if (t.as === "admin") return "jobs created with the admin token: no tenant, no limits (--as admin)";
  const limits = t.limits ?? {};
  const set = t.setByBench ?? {};
  const shown = ["maxRunsInFlight", "requestsPerSecond", "maxJobs"].map((k) => `${k} ${limits[k] ?? "none"}`).join(", ");
  const changed = Object.entries(set).map(([k, v]) => `${k} set to ${v}`);
  return `a tenant made through the API, its own key: ${shown}; ${changed.length ? `${changed.join(", ")} by the bench, other limits default` : "every limit its default"}`;
}

const missedLine = (s: SummaryWithMissed) =>
  `missed ${s.missed} of ${s.count}; counting them as never arriving: p50 ${lagOrMissed(s.p50)}  p90 ${lagOrMissed(s.p90)}  p99 ${lagOrMissed(s.p99)}  max ${lagOrMissed(s.max)}`;
const fromT = (atMs: number) => `${atMs >= 0 ? "+" : ""}${(atMs / 1000).toFixed(1)}s`;
const what = (r: Result) => (r.workload === "burst" ? "jobs" : "schedules");

const throttledText = (t: { refusals: number; waitedMs: number } | null | undefined) =>
  !t
    ? ""
    : t.refusals === 0
      ? "; none refused for the rate limit"
      : `; ${t.refusals} refused for the rate limit (429), waited out ${(t.waitedMs / 1000).toFixed(1)} s and asked again`;
const removalText = (x: { removed: number; failed: number } | undefined) =>
  x ? `; removed before T: ${x.removed}${x.failed ? `, ${x.failed} NOT removed` : ""}` : "";

function creationLines(r: Result): string[] {
  const out: string[] = [];
  if (r.tenant) out.push(`  jobs of         ${tenantLine(r.tenant)}`);
  if (r.callsInFlight) out.push(`  calls in flight ${r.callsInFlight.total} at most (${r.callsInFlight.how})`);
  if (r.warmup) {
    const w = r.warmup;
    out.push(
      `  warm-up         ${w.created}/${w.jobs} one-off jobs created, ${w.received} fired and received${throttledText(w.throttled)}${removalText(w.removal)}`,
    );
  }
  if (r.calibration)
    out.push(
      `  calibration     ${r.calibration.created ?? 0} ${what(r)}, ${r.calibration.jobsPerSecond ?? r.calibration.assumedJobsPerSecond}/s${throttledText(r.calibration.throttled)}${removalText(r.calibration.removal)}`,
    );
  if (r.creation) {
    const c = r.creation;
    const calls = c.itemsPerCall > 1 ? `${c.itemsPerCall} per call, ` : "";
    out.push(
      `  creation        ${c.created} created, ${c.failed} failed, ${c.notAttempted} not attempted; ${c.jobsPerSecond}/s over ${c.seconds} s as measured (${calls}${r.options.concurrency} calls in flight)${throttledText(c.throttled)}`,
    );
    const failures = Object.entries(c.failures);
    if (failures.length) out.push(`  creation failed ${failures.map(([why, n]) => `${n}× ${why}`).join(", ")}${quotaHint(failures)}`);
    out.push(
      `  create call     p50 ${ms(c.requestMs.p50)}  p99 ${ms(c.requestMs.p99)}  max ${ms(c.requestMs.max)}${c.throttled ? " (rate-limit waits included)" : ""}`,
    );
    out.push(
      `  T vs creation   ${c.slackMs >= 0 ? `creation ended ${ms(c.slackMs)} before T` : `LATE: creation ended ${ms(-c.slackMs)} after T; ${c.createdAfterT} created after T`}${c.nextRunAtMismatch ? `; ${c.nextRunAtMismatch} whose first instant is not T` : ""}`,
    );
  }
  return out;
}

/** A creation the tenant's maxJobs refused: said plainly, with the way out. */
const quotaHint = (failures: ReadonlyArray<[string, number]>) =>
  failures.some(([why]) => why.includes("quota_exceeded"))
    ? " — the tenant's maxJobs refused them: lower --jobs, or raise that one limit with --tenant-max-jobs"
    : "";

function cpuLines(r: Result): string[] {
  const c = r.cpu;
  if (!c) return [];
  const byProcess = Object.entries(c.msPerRunByProcess ?? {})
    .filter(([name]) => (c.msByProcess[name]?.user ?? 0) + (c.msByProcess[name]?.system ?? 0) > 0)
    .map(([name, used]) => `${name} ${cpuMs(used)}`)
    .join(", ");
  const a = c.allMsPerRun;
  return [
    `  CPU             ${cpuMs(a)} ms per call received, every process (user ${a?.user ?? "-"}, system ${a?.system ?? "-"}); ${c.calls} calls, ${c.window}, ${Math.round(c.allMs.user + c.allMs.system)} ms in all`,
    `                  per call, ms: ${byProcess || "-"}`,
  ];
}

function burstLines(r: Result): string[] {
  const out: string[] = [];
  if (!r.delivery) return out;
  const d = r.delivery;
  out.push(
    `  fire lag        p50 ${ms(d.lagMs.p50)}  p90 ${ms(d.lagMs.p90)}  p99 ${ms(d.lagMs.p99)}  max ${ms(d.lagMs.max)}  (min ${ms(d.lagMs.min)}, mean ${ms(d.lagMs.mean)}) over the ${d.received} received`,
  );
  if (d.lagMsWithMissed) out.push(`                  ${missedLine(d.lagMsWithMissed)}`);
  out.push(`  first arrival   T+${ms(d.firstArrivalMs)}`);
  out.push(
    `  drain           ${ms(d.drainMs)} (last job's first receipt − T); ${d.drainJobsPerSecond ?? "-"} jobs/s between first and last`,
  );
  out.push(`  received        ${d.received}/${d.expected}   lost ${d.lost}`);
  out.push(
    `  duplicates      ${d.duplicates.extraReceipts} extra receipts; ${d.duplicates.runIdsReceivedMoreThanOnce} run ids received more than once; ${d.duplicates.jobsWithMoreThanOneRunId} jobs with more than one run id; ${d.duplicates.receiptsWithAttemptAbove1} receipts with attempt > 1`,
  );
  const oddities = [
    d.earlyFires && `${d.earlyFires} arrived before T`,
    d.scheduledAtHeaderMismatch && `${d.scheduledAtHeaderMismatch} with a scheduled-at header ≠ T`,
    d.unexpected.calibrationFires && `${d.unexpected.calibrationFires} calibration jobs fired`,
    d.unexpected.unknownPaths && `${d.unexpected.unknownPaths} unknown requests`,
    d.unexpected.fromJobsWhoseCreationFailed && `${d.unexpected.fromJobsWhoseCreationFailed} from jobs whose creation failed`,
  ].filter(Boolean);
  if (oddities.length) out.push(`  oddities        ${oddities.join("; ")}`);
  const ps = d.arrivalsPerSecondAfterT;
  if (ps.length) out.push(`  arrivals/s      ${ps.slice(0, 40).join(" ")}${ps.length > 40 ? " …" : ""}`);
  return out;
}

function steadyLines(r: Result): string[] {
  const out: string[] = [];
  if (!r.steady) return out;
  const s = r.steady;
  const list = (xs: ReadonlyArray<number | null>) =>
    `${xs
      .slice(0, 40)
      .map((x) => (x === null ? "-" : Math.round(x)))
      .join(" ")}${xs.length > 40 ? " …" : ""}`;
  out.push(
    `  fire lag        p50 ${ms(s.lagMs.p50)}  p90 ${ms(s.lagMs.p90)}  p99 ${ms(s.lagMs.p99)}  max ${ms(s.lagMs.max)}  (min ${ms(s.lagMs.min)}, mean ${ms(s.lagMs.mean)}) over the ${s.receivedPairs} received`,
  );
  if (s.lagMsWithMissed) out.push(`                  ${missedLine(s.lagMsWithMissed)}`);
  out.push(`  lag p50 by s    ${list(s.lagP50BySecond)}`);
  out.push(
    `  pairs           ${s.receivedPairs}/${s.expectedPairs} (schedule, second) pairs received; missed ${s.missed}${s.missed ? ` in ${s.schedulesWithMisses} schedules; by second ${list(s.missedBySecond)}` : ""}`,
  );
  out.push(
    `  duplicates      ${s.doubleFires} double fires (pairs with more than one run id); ${s.extraReceipts} extra receipts; ${s.runIdsReceivedMoreThanOnce} run ids received more than once; ${s.receiptsWithAttemptAbove1} receipts with attempt > 1`,
  );
  const o = s.outsideWindow;
  const other = r.otherReceipts;
  const oddities = [
    o.early && `${o.early} for seconds before T`,
    o.extra && `${o.extra} for seconds after the last`,
    o.offGrid && `${o.offGrid} for instants off the whole seconds`,
    o.unreadable && `${o.unreadable} without a readable scheduled-at`,
    s.firedBeforeInstant && `${s.firedBeforeInstant} pairs first received before their second`,
    s.fromSchedulesNotCreated && `${s.fromSchedulesNotCreated} from schedules whose creation failed`,
    s.missingRunIdHeader && `${s.missingRunIdHeader} without a run id`,
    other?.calibrationFires && `${other.calibrationFires} calibration jobs fired`,
    other?.unknownPaths && `${other.unknownPaths} unknown requests`,
  ].filter(Boolean);
  out.push(`  outside window  ${oddities.length ? oddities.join("; ") : "none"}`);
  return out;
}

function edgecronLines(r: Result): string[] {
  const out: string[] = [];
  if (r.queue) {
    const q = r.queue;
    out.push(
      `  queue batches   ${q.batchesDuringBurst} batches, ${q.messages} messages; size p50 ${q.batchSize.p50 ?? "-"}; batch time p50 ${ms(q.batchMs.p50)} max ${ms(q.batchMs.max)}; max ${q.maxConcurrentBatches} at once; consumer busy ${ms(q.consumerBusyMs)}`,
    );
  }
  if (r.runsApiSample) {
    const s = r.runsApiSample;
    const states = Object.entries(s.statesAndAttempts)
      .map(([k, v]) => `${v}× ${k}`)
      .join(", ");
    out.push(`  runs API sample ${s.jobs} jobs: ${states || "-"}${s.errors ? `; ${s.errors} errors` : ""}`);
    out.push(
      `                  dispatched T+ p50 ${ms(s.dispatchedMsAfterT.p50)} max ${ms(s.dispatchedMsAfterT.max)}; dispatch→receipt p50 ${ms(s.dispatchToReceiptMs.p50)} max ${ms(s.dispatchToReceiptMs.max)}`,
    );
  }
  if (r.cpu) {
    const w = r.cpu.workerdMsPerRun;
    if (w)
      out.push(
        `  CPU of workerd  ${cpuMs(w)} ms per call received (user ${w.user}, system ${w.system}): edgecron's code and the local platform`,
      );
    const p = r.cpu.profile;
    if (p) {
      const parts = Object.entries(p.msByPart)
        .filter(([, used]) => used > 0)
        .map(([part, used]) => `${part} ${used} ms`)
        .join(", ");
      out.push(
        `  CPU profile     ${parts}; runtime (GC, V8) ${p.runtimeMs} ms; idle ${p.idleMs} ms of ${p.profiledMs} ms (profiled: lags not comparable)`,
      );
      out.push(
        `                  top: ${p.topModules
          .slice(0, 6)
          .map((m) => `${m.module} ${m.ms}`)
          .join(", ")}`,
      );
    }
  }
  if (r.stackLog) {
    const log = r.stackLog;
    const sweeps = log.sweeps.map((s) => `T${fromT(s.atMsFromT)}`);
    out.push(
      `  stack log       ${log.errorLines} error lines${log.workerdTailStreamErrors ? ` (+${log.workerdTailStreamErrors} workerd tail-stream errors)` : ""}; sweeps at ${sweeps.join(", ") || "-"}`,
    );
    if (log.reloadsAfterReady.length) {
      out.push(
        `  WARNING         wrangler reloaded the worker ${log.reloadsAfterReady.length}× (at T${log.reloadsAfterReady.map(fromT).join(", ")}): a source file changed; this run is not representative`,
      );
    }
  }
  return out;
}

function bullmqLines(r: Result): string[] {
  const out: string[] = [];
  const b = r.bullmq;
  if (!b) return out;
  const s = b.setup as {
    bullmq: string | null;
    ioredis: string | null;
    redis?: string | null;
    workerProcesses: number;
    concurrencyPerWorker: number;
    redisPersistence: string;
  };
  out.push(
    `  setup           BullMQ ${s.bullmq} (ioredis ${s.ioredis}), redis ${s.redis ?? "?"} (persistence: ${s.redisPersistence}); ${s.workerProcesses} worker processes × concurrency ${s.concurrencyPerWorker}; attempts 3, exponential backoff 1 s, full jitter`,
  );
  if (b.jobCounts) {
    const counts = Object.entries(b.jobCounts)
      .filter(([, n]) => n > 0)
      .map(([k, n]) => `${k} ${n}`)
      .join(", ");
    out.push(`  queue counts    ${counts || "-"} (warm-up and calibration jobs removed before T)`);
  }
  if (b.workers) {
    const failed: Record<string, number> = {};
    for (const w of b.workers) for (const [k, n] of Object.entries(w.failedAttempts)) failed[k] = (failed[k] ?? 0) + n;
    const mismatch = b.workers.reduce((a, w) => a + w.idInstantMismatch, 0);
    const errors = b.workers.reduce((a, w) => a + w.workerErrors.length, 0);
    out.push(
      `  workers         ${b.workers.reduce((a, w) => a + w.succeeded, 0)} calls answered 2xx (warm-up included); failed attempts ${JSON.stringify(failed)}${mismatch ? `; ${mismatch} job ids naming another instant than prevMillis` : ""}${errors ? `; ${errors} worker errors` : ""}`,
    );
  }
  if (b.redis)
    out.push(
      `  redis           ${b.redis.commandsProcessed} commands (${b.redis.commandsPerCompletedJob ?? "-"} per completed job), memory peak ${b.redis.usedMemoryPeakMb ?? "-"} MB${b.redis.aofRewrites !== null ? `; AOF fsynced every second, ${b.redis.aofRewrites} AOF rewrites` : ""}`,
    );
  if (r.stackLog?.errorLines) out.push(`  log             ${r.stackLog.errorLines} error lines, e.g. ${r.stackLog.errorExamples[0] ?? ""}`);
  return out;
}

/** The summary printed at the end of one system's run: every figure of bench/README.md that the run got to. */
export function summaryLines(r: Result): string[] {
  const out: string[] = [""];
  const system = r.system === "edgecron" && r.code?.topology ? `${labelOf(r)}, topology ${r.code.topology}` : labelOf(r);
  if (r.workload === "burst") out.push(`burst on ${system}: ${r.options.jobs} one-off jobs due at one instant T = ${r.schedule?.T ?? "-"}`);
  else
    out.push(
      `steady on ${system}: ${r.options.schedules} schedules, each due every second from T = ${r.schedule?.T ?? "-"} for ${r.options["duration-s"]} s`,
    );
  out.push(...creationLines(r));
  out.push(...(r.workload === "burst" ? burstLines(r) : steadyLines(r)));
  out.push(...cpuLines(r));
  out.push(...(r.system === "edgecron" ? edgecronLines(r) : bullmqLines(r)));
  const e = r.environment;
  const loadAtEnd = e.loadavgAtEnd?.[0] ?? null;
  out.push(
    `  machine         ${e.cpus} CPUs, Node ${e.node}, load average ${e.loadavgAtStart[0]} at start, ${loadAtEnd ?? "-"} at end${loadAtEnd !== null && loadAtEnd > e.cpus ? " (busy machine: expect noisy figures)" : ""}`,
  );
  if (!r.harness.ok) out.push(`  HARNESS ERROR   ${String(r.harness.error).split("\n")[0]}`);
  return out;
}

type Row = [string, (r: Result) => string | number | null | undefined];

const SETUP_ROWS: Row[] = [
  ["calls in flight at most", (r) => r.callsInFlight?.total],
  ["warm-up jobs received", (r) => r.warmup && `${r.warmup.received}/${r.warmup.jobs}`],
];

const CREATION_ROWS: Row[] = [
  ["creation rate (/s), measured", (r) => r.creation?.jobsPerSecond],
  ["refused for rate limit (429)", (r) => (r.creation?.throttled ? r.creation.throttled.refusals : "-")],
  ["creation ended before T", (r) => ms(r.creation?.slackMs)],
];

const COST_ROWS: Row[] = [
  ["CPU per call, all (ms)", (r) => cpuMs(r.cpu?.allMsPerRun)],
  ["CPU in the window (ms)", (r) => (r.cpu ? Math.round(r.cpu.allMs.user + r.cpu.allMs.system) : null)],
  ["$ per million runs (meters)", (r) => r.cost?.usdPerMillionRuns?.toFixed(2)],
];

const BURST_ROWS: Row[] = [
  ["jobs created", (r) => r.creation?.created],
  ...CREATION_ROWS,
  ["fire lag p50", (r) => ms(r.delivery?.lagMs.p50)],
  ["fire lag p90", (r) => ms(r.delivery?.lagMs.p90)],
  ["fire lag p99", (r) => ms(r.delivery?.lagMs.p99)],
  ["missed (lost)", (r) => r.delivery?.lost],
  ["p99, missed = ∞", (r) => lagOrMissed(r.delivery?.lagMsWithMissed?.p99)],
  ["fire lag max", (r) => ms(r.delivery?.lagMs.max)],
  ["first arrival", (r) => ms(r.delivery?.firstArrivalMs)],
  ["drain", (r) => ms(r.delivery?.drainMs)],
  ["drain rate (jobs/s)", (r) => r.delivery?.drainJobsPerSecond],
  ["received", (r) => r.delivery && `${r.delivery.received}/${r.delivery.expected}`],
  ["extra receipts", (r) => r.delivery?.duplicates.extraReceipts],
  ["run ids received > once", (r) => r.delivery?.duplicates.runIdsReceivedMoreThanOnce],
  ["jobs with > 1 run id", (r) => r.delivery?.duplicates.jobsWithMoreThanOneRunId],
  ["receipts with attempt > 1", (r) => r.delivery?.duplicates.receiptsWithAttemptAbove1],
  ["early fires (before T)", (r) => r.delivery?.earlyFires],
];

const STEADY_ROWS: Row[] = [
  ["schedules created", (r) => r.creation?.created],
  ...CREATION_ROWS,
  ["fire lag p50", (r) => ms(r.steady?.lagMs.p50)],
  ["fire lag p90", (r) => ms(r.steady?.lagMs.p90)],
  ["fire lag p99", (r) => ms(r.steady?.lagMs.p99)],
  ["missed fires", (r) => r.steady?.missed],
  ["p99, missed = ∞", (r) => lagOrMissed(r.steady?.lagMsWithMissed?.p99)],
  ["fire lag max", (r) => ms(r.steady?.lagMs.max)],
  ["pairs received", (r) => r.steady && `${r.steady.receivedPairs}/${r.steady.expectedPairs}`],
  ["double fires", (r) => r.steady?.doubleFires],
  ["extra receipts", (r) => r.steady?.extraReceipts],
  ["run ids received > once", (r) => r.steady?.runIdsReceivedMoreThanOnce],
  ["receipts with attempt > 1", (r) => r.steady?.receiptsWithAttemptAbove1],
  ["outside window early/extra", (r) => r.steady && `${r.steady.outsideWindow.early}/${r.steady.outsideWindow.extra}`],
  ["off-grid / unreadable", (r) => r.steady && `${r.steady.outsideWindow.offGrid}/${r.steady.outsideWindow.unreadable}`],
  ["pairs first received early", (r) => r.steady?.firedBeforeInstant],
];

const COMMON_ROWS: Row[] = [
  ["harness", (r) => (r.harness.ok ? "ok" : "ERROR")],
  ["load average at end", (r) => r.environment.loadavgAtEnd?.[0]],
];

/** The systems side by side: one row per figure, one column per system. */
export function comparisonLines(results: readonly Result[]): string[] {
  const rows = [...SETUP_ROWS, ...(results[0]?.workload === "steady" ? STEADY_ROWS : BURST_ROWS), ...COST_ROWS, ...COMMON_ROWS];
  const cells = rows.map(([name, get]) => [name, ...results.map((r) => String(get(r) ?? "-"))]);
  const header = ["", ...results.map(labelOf)];
  const widths = header.map((h, c) => Math.max(h.length, ...cells.map((row) => row[c]!.length)));
  const line = (row: string[]) => `  ${row.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join("   ")}`;
  const w = results[0];
  const title =
    w?.workload === "steady"
      ? `steady, side by side: ${w.options.schedules} schedules × ${w.options["duration-s"]} s each`
      : `burst, side by side: ${w?.options.jobs} jobs due at one instant`;
  const cpuBy = results.map((r) => {
    const each = Object.entries(r.cpu?.msPerRunByProcess ?? {}).filter(([, used]) => used.user + used.system > 0);
    return `  CPU per call by process, ${labelOf(r)}: ${each.map(([name, used]) => `${name} ${cpuMs(used)}`).join(", ") || "-"} ms`;
  });
  return ["", title, line(header), line(widths.map((n) => "-".repeat(n))), ...cells.map(line), "", ...cpuBy];
}
