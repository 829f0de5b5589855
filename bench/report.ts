import type { Result } from "./result.ts";

const ms = (x: number | null | undefined) => (x === null || x === undefined ? "-" : `${Math.round(x)} ms`);
const fromT = (atMs: number) => `${atMs >= 0 ? "+" : ""}${(atMs / 1000).toFixed(1)}s`;

/** The summary printed at the end of a run: every figure of bench/README.md that the run got to. */
export function summaryLines(r: Result): string[] {
  const out: string[] = [];
  out.push("", `burst: ${r.options.jobs} one-off jobs due at one instant T = ${r.schedule?.T ?? "-"}`);
  if (r.calibration)
    out.push(
      `  calibration     ${r.calibration.created ?? 0} jobs, ${r.calibration.jobsPerSecond ?? r.calibration.assumedJobsPerSecond} jobs/s`,
    );
  if (r.creation) {
    const c = r.creation;
    out.push(
      `  creation        ${c.created} created, ${c.failed} failed, ${c.notAttempted} not attempted; ${c.jobsPerSecond} jobs/s over ${c.seconds} s (${r.options.concurrency} in flight)`,
    );
    out.push(`  create request  p50 ${ms(c.requestMs.p50)}  p99 ${ms(c.requestMs.p99)}  max ${ms(c.requestMs.max)}`);
    out.push(
      `  T vs creation   ${c.slackMs >= 0 ? `creation ended ${ms(c.slackMs)} before T` : `LATE: creation ended ${ms(-c.slackMs)} after T; ${c.createdAfterT} jobs created after T`}`,
    );
  }
  if (r.delivery) {
    const d = r.delivery;
    out.push(
      `  fire lag        p50 ${ms(d.lagMs.p50)}  p90 ${ms(d.lagMs.p90)}  p99 ${ms(d.lagMs.p99)}  max ${ms(d.lagMs.max)}  (min ${ms(d.lagMs.min)}, mean ${ms(d.lagMs.mean)})`,
    );
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
  }
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
      `                  claimed T+ p50 ${ms(s.claimedMsAfterT.p50)} max ${ms(s.claimedMsAfterT.max)}; claim→receipt p50 ${ms(s.claimToReceiptMs.p50)} max ${ms(s.claimToReceiptMs.max)}`,
    );
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
  const e = r.environment;
  const loadAtEnd = e.loadavgAtEnd?.[0] ?? null;
  out.push(
    `  machine         ${e.cpus} CPUs, Node ${e.node}, load average ${e.loadavgAtStart[0]} at start, ${loadAtEnd ?? "-"} at end${loadAtEnd !== null && loadAtEnd > e.cpus ? " (busy machine: expect noisy figures)" : ""}`,
  );
  if (!r.harness.ok) out.push(`  HARNESS ERROR   ${String(r.harness.error).split("\n")[0]}`);
  return out;
}
