/** The burst workload's figures (bench/README.md): which jobs arrived, how late, how often. Shared by every system measured. */
import { type Created, type Harness, iso } from "./harness.ts";
import { perSecond, round, summarize, summarizeWithMissed } from "./stats.ts";

export interface Delivery {
  lost: number[];
  /** Jobs whose receipts carried more than one run id. */
  multiRunJobs: number[];
}

/** The figures of what arrived (result.delivery). */
export function analyseDelivery(
  { receiver, result }: Pick<Harness, "receiver" | "result">,
  T: number,
  jobs: readonly Created[],
  expected: ReadonlySet<number>,
): Delivery {
  const Tiso = iso(T);
  const burst = receiver.receipts.filter((r) => r.kind === "burst");
  const byIndex = new Map<number, typeof burst>();
  for (const r of burst) {
    const list = byIndex.get(r.index!) ?? [];
    list.push(r);
    byIndex.set(r.index!, list);
  }
  const lagByJob = jobs.map((j, i) => {
    const got = receiver.firstReceipt.get(i);
    return j?.id && got !== undefined ? got - T : null;
  });
  const lags = lagByJob.filter((x) => x !== null);
  const lost = [...expected].filter((i) => !byIndex.has(i));
  const runIdCounts = new Map<string, number>();
  for (const r of burst) if (r.runId) runIdCounts.set(r.runId, (runIdCounts.get(r.runId) ?? 0) + 1);
  const repeatedRunIds = [...runIdCounts].filter(([, n]) => n > 1);
  const multiRunJobs = [...byIndex].filter(([, list]) => new Set(list.map((r) => r.runId)).size > 1).map(([i]) => i);
  const lagStats = summarize(lags);
  const first = lagStats.min;
  const lastFirst = lagStats.max;
  const lastAny = burst.length ? burst.reduce((m, r) => Math.max(m, r.t), -Infinity) - T : null;
  const lateCreated = jobs.flatMap((j, i) => (j?.id && j.createdAt > T ? [i] : []));
  result.delivery = {
    expected: expected.size,
    received: lags.length,
    lost: lost.length,
    lostIndexes: lost.slice(0, 100),
    lagMs: lagStats,
    lagMsWithMissed: summarizeWithMissed(lags, lost.length),
    firstArrivalMs: first,
    drainMs: lastFirst,
    lastReceiptMs: lastAny,
    drainJobsPerSecond:
      lags.length > 1 && first !== null && lastFirst !== null && lastFirst > first
        ? round(((lags.length - 1) * 1000) / (lastFirst - first))
        : null,
    earlyFires: lags.filter((x) => x < 0).length,
    duplicates: {
      receipts: burst.length,
      extraReceipts: burst.length - byIndex.size,
      runIdsReceivedMoreThanOnce: repeatedRunIds.length,
      jobsWithMoreThanOneRunId: multiRunJobs.length,
      receiptsWithAttemptAbove1: burst.filter((r) => r.attempt !== null && Number(r.attempt) > 1).length,
      examples: repeatedRunIds.slice(0, 10).map(([id, n]) => ({ runId: id, receipts: n })),
    },
    scheduledAtHeaderMismatch: burst.filter((r) => r.scheduledAt !== Tiso).length,
    missingRunIdHeader: burst.filter((r) => !r.runId).length,
    unexpected: {
      calibrationFires: receiver.receipts.filter((r) => r.kind === "calibration").length,
      unknownPaths: receiver.receipts.filter((r) => r.kind === "unknown").length,
      fromJobsWhoseCreationFailed: burst.filter((r) => !expected.has(r.index!)).length,
    },
    lateCreatedJobs: lateCreated.length,
    lagMsOfLateCreatedJobs: summarize(lateCreated.flatMap((i) => lagByJob[i] ?? [])),
    arrivalsPerSecondAfterT: perSecond(lags),
  };
  // Kept for the JSON file, out of the summary: one entry per job.
  result.delivery.lagMsByJob = lagByJob;
  return { lost, multiRunJobs };
}
