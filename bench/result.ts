/**
 * The shape of `bench/results/<workload>-<system>-<timestamp>.json` (formatVersion 3). 2 had
 * BullMQ's CPU over the whole life of its processes (`bullmq.workersCpuSeconds`,
 * `bullmq.redis.cpuSeconds`) and `cpu` for edgecron only; 1 was burst on edgecron only, named
 * burst-<timestamp>.json, without `system` and `steady`.
 */
import type { Options, System, Workload } from "./options.ts";
import type { Summary, SummaryWithMissed } from "./stats.ts";
import type { SteadyFigures } from "./steady.ts";

interface Throttled {
  refusals: number;
  waitedMs: number;
}

/** What became of the warm-up or calibration items the bench removed before T. */
interface Removal {
  removed: number;
  failed: number;
  seconds: number | null;
  errors: string[];
}

export interface Result {
  system: System;
  workload: Workload;
  formatVersion: 3;
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
  code?: { commit: string | null; uncommittedChanges: string[] | null; ranFrom?: string; devRegistry?: string; topology?: string };
  startup?: { readyAfterMs: number; port: number; workDir: string };
  /** edgecron: whose the jobs are; a tenant's limits as the API answered, and those the bench gave rather than the defaults. */
  tenant?: { as: "tenant" | "admin"; id?: string; limits?: Record<string, number | null>; setByBench?: Record<string, number> };
  /** Target calls the system can have waiting at once (bench/in-flight.ts), and how that comes about. */
  callsInFlight?: { total: number; how: string };
  warmup?: {
    jobs: number;
    created: number;
    failed: number;
    received: number;
    creationSeconds: number | null;
    throttled: Throttled | null;
    removal: Removal;
  };
  calibration?: {
    jobs: number;
    created?: number;
    seconds?: number | null;
    jobsPerSecond?: number | null;
    assumedJobsPerSecond?: number;
    throttled?: Throttled | null;
    removal?: Removal;
  };
  schedule?: {
    T: string;
    TEpochMs: number;
    chosenAt: string;
    estimatedCreationMs: number;
    safety: number;
    marginMs: number;
    leadMs: number;
    /** steady: the last second due, and the end bound given to each schedule (half a second after it). */
    lastSecond?: string;
    endBound?: string;
  };
  creation?: {
    attempted: number;
    created: number;
    failed: number;
    notAttempted: number;
    failures: Record<string, number>;
    seconds: number | null;
    jobsPerSecond: number | null;
    /** edgecron: 1 (a request per job); bullmq: the addBulk chunk (burst) or 1 (a scheduler per call). */
    itemsPerCall: number;
    /** Per call, in ms (each item of a call counts once). */
    requestMs: Summary;
    endedAt: string;
    /** > 0: creation finished before T. */
    slackMs: number;
    createdAfterT: number;
    /** edgecron: nextRunAt ≠ T; bullmq steady: the first job's id does not name T. */
    nextRunAtMismatch: number;
    /** Rate-limit refusals (429) waited out and asked again; null: the system has no such limit here. */
    throttled: Throttled | null;
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
    /** Over every created job, a lost one counted as an infinite lag. */
    lagMsWithMissed: SummaryWithMissed;
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
  /** steady: the figures of bench/steady.ts. */
  steady?: SteadyFigures;
  /** steady: receipts of no schedule of the workload. */
  otherReceipts?: { calibrationFires: number; unknownPaths: number };
  /** The BullMQ peer: its setup and its own view of the run. */
  bullmq?: {
    setup: Record<string, unknown>;
    /** queue.getJobCounts() after the wait. */
    jobCounts?: Record<string, number>;
    workers?: import("./bullmq-worker.ts").WorkerStats[];
    redis?: {
      version: string | null;
      /** "no", or "everysec": appendonly yes, appendfsync everysec. */
      appendfsync: string;
      commandsProcessed: number;
      commandsPerCompletedJob: number | null;
      aofRewrites: number | null;
      usedMemoryPeakMb: number | null;
      window: string;
    };
  };
  /** edgecron: the stack's queue batches (burst: during the burst; steady: from T − 1 s to the end of the wait). */
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
  /** Every process of the system (edgecron: the stack; BullMQ: redis-server and the workers), from half a second before T to the end of the wait (bench/process-cpu.ts). */
  cpu?: {
    window: string;
    /** Target calls received in the window: the divisor of the figures per run. */
    calls: number;
    msByProcess: Record<string, import("./process-cpu.ts").CpuMs>;
    allMs: import("./process-cpu.ts").CpuMs;
    /** Every process together per call received. */
    allMsPerRun: import("./process-cpu.ts").CpuMs | null;
    /**
     * workerd's CPU ms per target call received, user and system, every workerd process together
     * (both Workers' with --topology two): edgecron's code (the API, the shards, the consumer) and the local emulation of D1, Queues and Durable Object storage.
     */
    workerdMsPerRun: import("./process-cpu.ts").CpuMs | null;
    /** Each process's CPU ms per target call received (msByProcess's names), every process counted. */
    msPerRunByProcess?: Record<string, import("./process-cpu.ts").CpuMs> | null;
    /** With --profile: where workerd's time went, by part of edgecron (bench/cpu-profile.ts). */
    profile?: import("./cpu-profile.ts").CpuBreakdown;
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
    /** The run's startedAt (its dispatch, when its attempt began) − T. */
    dispatchedMsAfterT: Summary;
    dispatchToReceiptMs: Summary;
    receiptToReportMs: Summary;
  };
}
