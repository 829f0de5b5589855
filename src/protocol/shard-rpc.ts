import type { RunState } from "../model/run-states";
import type { LagCounts } from "./alarm-lag";
import type { Dispatch, LeaseToRenew, Outcome, RunOrder } from "./queue-messages";
import type { AttemptRow, JobDefinition, JobRuntime, RunRow, TenantSettings } from "./stored-rows";
import type { ShardTotals } from "./totals";

/**
 * What may be asked of a shard over RPC (`ShardApi`, which the Durable Object class in
 * src/shard/shard.ts implements and src/stubs.ts hands callers), and the answers: refusals by
 * name, runs as shown, the shard's figures. The API, the consumer, the sweep and the tenant
 * gates import this, never the shard's implementation.
 */

/**
 * Why a shard did not do what it was asked. Every call that can be refused answers
 * `Answer<T, R>`, so a caller handles each refusal by name and the type checker sees any it forgot.
 */
export type Refusal =
  | "unknown_job"
  | "unknown_run"
  | "job_paused"
  | "too_many"
  | "not_retryable"
  /** The completion token is not one this shard issued for the run. */
  | "invalid_token"
  /** The token is of an attempt that has ended (timed out, cancelled or already reported). */
  | "stale";

/** What makes a run by request: a person's trigger key, or a run of another job that ended. */
export type TriggeredBy = { triggerKey: string } | { chainedFrom: string };

export type Answer<T, R extends Refusal> = { ok: true; value: T } | { ok: false; refusal: R };

export const done = <T>(value: T): { ok: true; value: T } => ({ ok: true, value });

export const refuse = <R extends Refusal>(refusal: R): { ok: false; refusal: R } => ({ ok: false, refusal });

/** The answer to a call that presents a completion token, when it is refused. */
export type TokenRefusal = "unknown_run" | "invalid_token" | "stale";

/** A catalog entry as the sweep compares it with what a shard holds. */
export interface CatalogEntry {
  id: string;
  version: number;
  deleted: boolean;
}

/** What the sweep learns by comparing catalog entries with a shard. */
export interface JobComparison {
  /** Lacked, or held at an older version: to deliver again. */
  stale: string[];
  /** Deleted, and no longer held (retention removed its runs, then the job): the tombstone may go. */
  gone: string[];
}

/** A backfill makes at most this many runs per call. */
export const MAX_BACKFILL = 1_000;

export interface BackfillResult {
  created: string[];
  existing: string[];
}

/** A run as a shard shows it: with its attempt count, and on a single-run read every attempt. */
export interface RunView extends RunRow {
  attempts: number;
  attemptLog?: AttemptRow[];
  /** A workflow run read alone: each step of its job, in definition order. */
  steps?: StepRunView[];
}

/** One step of a workflow run: `blocked` until it starts (it has no run yet), then its run's state. */
export interface StepRunView {
  id: string;
  state: RunState | "blocked";
  attempt: number;
  status: number | null;
  startedAt: number | null;
  finishedAt: number | null;
  result: string | null;
  error: string | null;
  attemptLog: AttemptRow[];
}

/** A shard's cost meter's counters of one operation over a window (meter.ts). */
export interface OperationCost {
  calls: number;
  rowsRead: number;
  rowsWritten: number;
  queueMessages: number;
  gateRequests: number;
  runsFinished: number;
}

/** What a shard reports for a window: per operation, and what metering itself cost. */
export interface ShardCost {
  byOperation: Record<string, OperationCost>;
  /** Rows written by the table each statement writes (its index entries and triggers' writes with it); `(setAlarm)` for alarms set. */
  byTable: Record<string, number>;
  meter: { rowsRead: number; rowsWritten: number };
}

/** The shard as a Durable Object over a window, from its meter (meter.ts): what the runtime did to it. */
export interface DurableObjectFigures {
  /** Times the object was constructed: created, or again after an eviction, a restart or a deploy. */
  starts: number;
  /** How late its alarms started (alarm-lag.ts), retries left out. */
  alarmLag: LagCounts;
}

/** How the shard's writes to the run archive have been doing (retention.ts); of the whole shard, like `cost`. */
export interface ArchiveHealth {
  /** Failed writes in a row; 0 once one succeeds (or none was ever needed). */
  consecutiveFailures: number;
  /** When the retention pass tries again, while failing; null otherwise. */
  nextRetryAt: number | null;
  lastError: string | null;
}

export interface ShardMetrics {
  runsByState: Record<string, number>;
  attemptsByOutcome: Record<string, number>;
  lagsMs: number[];
  outbox: number;
  awaitingClaim: number;
  oldestAwaitingClaimMs: number | null;
  /** Of the whole shard, whatever the tenant asked for: its counters are not kept per tenant. */
  cost: ShardCost;
  /** Of the whole shard, like `cost`. */
  durableObject: DurableObjectFigures;
  archive: ArchiveHealth;
  /** The shard's counters since it was created (totals.ts); of the whole shard too. */
  totals: ShardTotals;
}

/** A shard's answer for a dispatch that came without its order: the order, or `stale` (the attempt has its outcome, or was replaced). */
/** `later`: the answer was full (it is bounded by bytes); the dispatch is to be asked for again. */
export type OpenResult = { result: "stale" | "later"; runId: string; fence: number } | ({ result: "open" } & RunOrder);

/** What a long-running target reports through POST /v1/runs/:id/complete. */
export interface Completion {
  ok: boolean;
  result?: string;
  error?: string;
  /** For a failure: whether another attempt may help (default true). */
  retry?: boolean;
}

/**
 * Every RPC method of a shard. Each is one transaction of the shard's single writer followed
 * by its settle step (docs/architecture.md, invariant 1); none needs the caller to say which
 * shard it is talking to.
 */
export interface ShardApi {
  /** Applies definitions newer than what the shard holds; older or equal versions change nothing. */
  applyJobs(definitions: JobDefinition[], tenants?: TenantSettings[]): Promise<JobRuntime[]>;
  /** Newer settings of tenants: a rotated signing secret, a changed runs-in-flight limit. */
  applyTenants(tenants: TenantSettings[]): Promise<void>;
  /**
   * A tenant gate says capacity freed: `places` of that tenant's parked runs are looked at now,
   * oldest first; with no tenant (a flow-control group's place freed), the waiting runs
   * deferred to a later time are.
   */
  admitWaiting(tenantId?: string, places?: number): Promise<void>;
  jobRuntimes(ids: string[]): Promise<JobRuntime[]>;
  /** Of these ids, the jobs this shard holds alone (`standalone`: QStash messages), deleted ones included; reads only. */
  standaloneJobs(ids: string[]): Promise<JobDefinition[]>;
  /** Up to `limit` of a tenant's live standalone jobs (every tenant's: null), newest first, before `beforeId`; reads only. */
  listStandaloneJobs(tenantId: string | null, limit: number, beforeId?: string): Promise<JobDefinition[]>;
  /**
   * How many of the tenant's QStash messages here made before `madeBefore` (a job id's prefix,
   * `jobIdsFrom`) are live (not delivered, dead nor cancelled): its gate's recount; reads only.
   */
  countLiveMessages(tenantId: string, madeBefore: string): Promise<number>;
  /**
   * One extra run now, by hand (the same trigger key always names the same run) or chained: the
   * run a run of another job of the tenant that ended triggers (onSuccess/onFailure), one per
   * (job, run that ended), however often asked.
   */
  trigger(jobId: string, by: TriggeredBy): Promise<Answer<RunView, "unknown_job" | "job_paused">>;
  backfill(jobId: string, from: number, to: number): Promise<Answer<BackfillResult, "unknown_job" | "job_paused" | "too_many">>;
  /** The orders of leased attempts whose dispatch came without one (too large for a message); reads only. */
  open(dispatches: Array<Dispatch & { leaseUntil?: number }>): Promise<OpenResult[]>;
  report(outcomes: Outcome[]): Promise<Array<"recorded" | "stale">>;
  complete(runId: string, token: string, completion: Completion): Promise<Answer<RunView, TokenRefusal>>;
  heartbeat(runId: string, token: string, extendMs: number): Promise<Answer<{ leaseUntil: number }, TokenRefusal>>;
  /** Leases of orders waiting at a consumer for a connection, renewed while still theirs: each one's new end, or null (it must not start). */
  renewLeases(leases: LeaseToRenew[]): Promise<Array<number | null>>;
  retryRun(runId: string): Promise<Answer<RunView, "unknown_run" | "not_retryable">>;
  abandonDispatches(dispatches: Dispatch[]): Promise<Array<"redispatched" | "ended" | "stale">>;
  /** A breaker is open for these dispatches' origin: their runs wait until `until`, attempts unspent; `giveUp`: they end dead, uncalled. */
  holdDispatches(holds: Array<Dispatch & { until: number; reason: string; giveUp?: boolean }>): Promise<Array<"held" | "stale">>;
  /** The order of a run's attempt its shard timed out (a QStash message's, for its failure callback); null if it is not that. */
  timedOutOrder(runId: string, fence: number): Promise<RunOrder | null>;
  /** The consumer delivered these notifications: the shard stops sending them. */
  notificationsDelivered(ids: string[]): Promise<void>;
  getRun(runId: string): Promise<RunView | null>;
  listRuns(jobId: string, limit: number, before?: { scheduledAt: number; id: string }): Promise<RunView[]>;
  deadLetters(
    scope: { tenantId: string | null; jobId: string | null },
    limit: number,
    before?: { finishedAt: number; id: string },
  ): Promise<RunView[]>;
  metrics(windowMs: number, tenantId?: string | null): Promise<ShardMetrics>;
  /** The catalog's entries against what this shard holds (see JobComparison). */
  compareJobs(entries: CatalogEntry[]): Promise<JobComparison>;
  /** Work already due runs now; otherwise the alarm is set again (alarms can be lost or late). */
  assertAlarm(): Promise<{ ranDueWork: boolean; alarmAt: number | null }>;
}
