/** The shape of `bench/results/burst-<timestamp>.json` (formatVersion 1). */
import type { Options } from "./options.ts";
import type { Summary } from "./stats.ts";

export interface Result {
  workload: "burst";
  formatVersion: 1;
  startedAt: string;
  finishedAt?: string;
  options: Options;
  environment: {
    node: string;
    cpus: number;
    cpuModel: string | null;
    totalMemMb: number;
    loadavgAtStart: Array<number | null>;
    loadavgAtEnd?: Array<number | null>;
    stackEnv: Record<string, string>;
  };
  logPath: string;
  harness: { ok: boolean; error: string | null };
  code?: { commit: string | null; uncommittedChanges: string[] | null; ranFrom?: string; devRegistry?: string };
  startup?: { readyAfterMs: number; port: number; workDir: string };
  tenant?: { maxRunsInFlight: number };
  calibration?: { jobs: number; created?: number; seconds?: number | null; jobsPerSecond?: number | null; assumedJobsPerSecond?: number };
  schedule?: {
    T: string;
    TEpochMs: number;
    chosenAt: string;
    estimatedCreationMs: number;
    safety: number;
    marginMs: number;
    leadMs: number;
  };
  creation?: {
    attempted: number;
    created: number;
    failed: number;
    notAttempted: number;
    failures: Record<string, number>;
    seconds: number | null;
    jobsPerSecond: number | null;
    requestMs: Summary;
    endedAt: string;
    /** > 0: creation finished before T. */
    slackMs: number;
    createdAfterT: number;
    nextRunAtMismatch: number;
  };
  waitEndedAt?: string;
  /** GET /v1/metrics' cost over the bench's window (bench/cost.ts). */
  cost?: import("./cost.ts").CostFigures;
  delivery?: {
    expected: number;
    received: number;
    lost: number;
    lostIndexes: number[];
    lagMs: Summary;
    firstArrivalMs: number | null;
    /** The last job's first receipt − T. */
    drainMs: number | null;
    /** Any receipt, duplicates included. */
    lastReceiptMs: number | null;
    drainJobsPerSecond: number | null;
    earlyFires: number;
    duplicates: {
      receipts: number;
      extraReceipts: number;
      runIdsReceivedMoreThanOnce: number;
      jobsWithMoreThanOneRunId: number;
      receiptsWithAttemptAbove1: number;
      examples: Array<{ runId: string; receipts: number }>;
    };
    scheduledAtHeaderMismatch: number;
    missingRunIdHeader: number;
    unexpected: { calibrationFires: number; unknownPaths: number; fromJobsWhoseCreationFailed: number };
    lateCreatedJobs: number;
    lagMsOfLateCreatedJobs: Summary;
    arrivalsPerSecondAfterT: number[];
    /** Per burst job index; null: not created, or lost. */
    lagMsByJob?: Array<number | null>;
  };
  queue?: {
    batchesDuringBurst: number;
    messages: number;
    acked: number;
    batchSize: Summary;
    batchMs: Summary;
    maxConcurrentBatches: number;
    consumerBusyMs: number;
    firstBatchEndedMs: number | null;
    lastBatchEndedMs: number | null;
    batchesOverall: number;
  };
  stackLog?: {
    /** ms from T; any reload spoils the run. */
    reloadsAfterReady: number[];
    sweeps: Array<Record<string, unknown> & { atMsFromT: number }>;
    errorLines: number;
    errorExamples: string[];
    workerdTailStreamErrors: number;
    apiRequestsLogged: number;
  };
  runsApiSample?: {
    jobs: number;
    errors: number;
    /** "succeeded/1": one run, succeeded, one attempt. */
    statesAndAttempts: Record<string, number>;
    /** The run's startedAt (its claim by the consumer) − T. */
    claimedMsAfterT: Summary;
    claimToReceiptMs: Summary;
    receiptToReportMs: Summary;
  };
}
