import type { JobSpec, Notify, NotifyEvent, StoredTarget } from "../model/job";
import type { LagCounts } from "./alarm-lag";
import type { AttemptOutcome } from "./attempt-states";
import type { FailureKind, RUN_TRIGGERS, RunState } from "./run-states";
import type { ShardTotals } from "./totals";

/**
 * The shard's contract: what the API, the consumer, the sweep and the tenant gates may ask of
 * a shard, and the shapes that cross that boundary. A leaf module, the way Hono keeps
 * `router.ts` apart from its routers: callers import this, never the Durable Object class or
 * its storage. The `Shard` class implements `ShardApi`; the stub helper hands callers the same.
 */

// ---- refusals ----

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

// ---- jobs ----

/** What the API (or the sweep) hands a shard: a job definition at a version. */
export interface JobDefinition {
  id: string;
  tenantId: string;
  version: number;
  spec: JobSpec;
  paused: boolean;
  deleted: boolean;
  createdAt: number;
}

/** What a shard knows of a job that the catalog does not: where its schedule stands. */
export interface JobRuntime {
  id: string;
  version: number;
  nextRunAt: number | null;
  /** Nothing is left to fire: a one-off fired, or endAt or maxRuns was reached. */
  completed: boolean;
}

/** What a shard needs to know of a tenant: how to sign its requests and how many may be in flight. */
export interface TenantSettings {
  id: string;
  version: number;
  signingGeneration: number;
  maxRunsInFlight: number | null;
  /** Days its finished runs stay before the archive; null or absent (a Worker of an earlier release): the default. */
  retentionDays?: number | null;
  /** Notifications for the tenant's jobs that name none of their own; null or absent: none. */
  notify?: Notify | null;
}

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

// ---- runs ----

export interface RunRow {
  id: string;
  jobId: string;
  jobVersion: number;
  trigger: (typeof RUN_TRIGGERS)[number];
  scheduledAt: number;
  catchUp: boolean;
  state: RunState;
  attempt: number;
  fence: number;
  dueAt: number | null;
  /** A running attempt's lease: when due_at comes, the run is timed out only if this has passed too. */
  leaseUntil: number | null;
  createdAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  status: number | null;
  error: string | null;
  result: string | null;
  /** The grant key of what this run holds at its tenant's gate while in flight (the tenant's permit, its flow-control group's, or both: src/gate/permit-keys.ts), if any. */
  permit: string | null;
  /** How often the current attempt's dispatch went out again unclaimed (0 on each new attempt). */
  redispatches: number;
  /** A workflow step's run: the workflow run it is a step of (docs/workflows.md); null for any other run. */
  parentRunId: string | null;
}

export interface AttemptRow {
  attempt: number;
  fence: number;
  startedAt: number;
  finishedAt: number | null;
  /** running: the target was called; accepted: it answered 202 and will complete through the API. */
  outcome: AttemptOutcome;
  status: number | null;
  error: string | null;
  completionToken: string;
  late: string | null;
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

// ---- the consumer's side ----

/** A dispatch as a shard names it: the run and the fence its attempt was leased under (docs/architecture.md, invariant 4). */
export interface Dispatch {
  runId: string;
  fence: number;
}

/**
 * What a tenant's gate keeps a target's circuit breaker by (src/gate/breaker.ts): the tenant
 * and the target's origin. Absent for a job that opted out.
 */
export interface BreakerKey {
  tenantId: string;
  origin: string;
}

/**
 * Everything a consumer needs to make one attempt of a run, made by the transaction that leased
 * it (the attempt begins when it is dispatched: there is no claim). The target stays sealed:
 * only the consumer opens it, for the request.
 */
export interface RunOrder extends Dispatch {
  jobId: string;
  tenantId: string;
  /** The tenant's signing generation as this shard last heard it: the consumer signs with it and the next. */
  signingGeneration: number;
  attempt: number;
  scheduledAt: number;
  target: StoredTarget;
  timeoutMs: number;
  completionToken: string;
  /** A workflow step's run: the workflow run's id and the step's (sent as headers). */
  step?: { runId: string; stepId: string };
  /** For a step whose target has no body: the JSON it is sent (the run and its parents' results). */
  input?: string;
}

/**
 * A dispatch on its way: with what the consumer's circuit breakers need, and its order. An order
 * too large for a queue message travels without it (`dispatch-packs.ts`); the consumer then asks
 * the shard for it (`ShardApi.open`).
 */
export type KeyedDispatch = Dispatch & Partial<BreakerKey> & { order?: RunOrder };

/**
 * One dispatch on the Queue, with its shard's name, so that the consumer knows whom to ask.
 * What shards sent before dispatches were packed; the consumer still takes it, so that the
 * messages a deploy finds in a queue are not lost, and a dead-letter queue may hold it.
 */
export interface DispatchMessage extends KeyedDispatch {
  shard: string;
}

/**
 * Several dispatches of one shard on the Queue as one message: the Queue bills three operations
 * per 64 KB of a message, so ten dispatches to a message cost a tenth (docs/cost.md). The
 * consumer acks it once each of its dispatches is done, or retries it whole.
 */
export interface DispatchPack {
  shard: string;
  dispatches: KeyedDispatch[];
}

/** A job's notification on its way to its receiver (notifier.ts): everything the consumer needs to send it. */
export interface NotifyMessage {
  kind: "notify";
  shard: string;
  id: string;
  event: NotifyEvent;
  url: string;
  tenantId: string;
  signingGeneration: number;
  body: string;
}

/**
 * A job to trigger because a run of another job of its tenant ended (onSuccess/onFailure,
 * notifier.ts): the consumer finds the job's shard and asks it for the chained run.
 */
export interface ChainMessage {
  kind: "chain";
  /** The shard of the run that ended, which confirms the message. */
  shard: string;
  id: string;
  tenantId: string;
  jobId: string;
  fromRunId: string;
}

/**
 * Outcomes a consumer could not report to their shard (the shard was unreachable after retries):
 * kept on the queue instead of thrown away, so a success is recorded as one however late
 * (src/consumer/reporter.ts). Its consumer reports them; a failed report retries the message.
 */
export interface OutcomesMessage {
  kind: "outcomes";
  shard: string;
  outcomes: Outcome[];
}

/** What the dispatch queues carry: dispatches of runs (no `kind`, as before notifications), notifications, chained triggers and outcomes kept. */
export type QueueMessage = DispatchPack | DispatchMessage | NotifyMessage | ChainMessage | OutcomesMessage;
/** A message of run dispatches: a pack, or one dispatch as shards sent them before packs. */
export type DispatchesMessage = DispatchPack | DispatchMessage;
export type OutboxMessage = NotifyMessage | ChainMessage;

export const isOutcomesMessage = (m: QueueMessage): m is OutcomesMessage => "kind" in m && m.kind === "outcomes";
export const isOutboxMessage = (m: QueueMessage): m is OutboxMessage => "kind" in m && m.kind !== "outcomes";

/** An attempt may outlive its timeout by this much before the shard calls it lost. */
export const LEASE_GRACE_MS = 5_000;

/** A shard's answer for a dispatch that came without its order: the order, or `stale` (the attempt has its outcome, or was replaced). */
export type OpenResult = { result: "stale"; runId: string; fence: number } | ({ result: "open" } & RunOrder);

export interface Outcome {
  runId: string;
  fence: number;
  ok: boolean;
  /** The target answered 202 Accepted: it finishes the work later and completes through the API. */
  accepted?: boolean;
  /** The target's HTTP status; null when it never answered (network error, timeout). */
  status: number | null;
  error: string | null;
  /** From the target's Retry-After header, when it sent one. */
  retryAfterMs?: number;
  /** Set when the status alone does not say it (a target the SSRF guard refused will not improve). */
  kind?: FailureKind;
  /** A workflow step's success: its response body (at most 64 KiB), which the steps below receive. */
  result?: string;
  /** When the consumer started the request (it had a connection): the attempt's start as the target saw it. */
  startedAt?: number;
}

/** What a long-running target reports through POST /v1/runs/:id/complete. */
export interface Completion {
  ok: boolean;
  result?: string;
  error?: string;
  /** For a failure: whether another attempt may help (default true). */
  retry?: boolean;
}

// ---- the surface ----

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
  /** A tenant gate says capacity freed: waiting runs are looked at now. */
  admitWaiting(): Promise<void>;
  jobRuntimes(ids: string[]): Promise<JobRuntime[]>;
  /**
   * One extra run now, by hand (the same trigger key always names the same run) or chained: the
   * run a run of another job of the tenant that ended triggers (onSuccess/onFailure), one per
   * (job, run that ended), however often asked.
   */
  trigger(jobId: string, by: TriggeredBy): Promise<Answer<RunView, "unknown_job" | "job_paused">>;
  backfill(jobId: string, from: number, to: number): Promise<Answer<BackfillResult, "unknown_job" | "job_paused" | "too_many">>;
  /** The orders of leased attempts whose dispatch came without one (too large for a message); reads only. */
  open(dispatches: Dispatch[]): Promise<OpenResult[]>;
  report(outcomes: Outcome[]): Promise<Array<"recorded" | "stale">>;
  complete(runId: string, token: string, completion: Completion): Promise<Answer<RunView, TokenRefusal>>;
  heartbeat(runId: string, token: string, extendMs: number): Promise<Answer<{ leaseUntil: number }, TokenRefusal>>;
  retryRun(runId: string): Promise<Answer<RunView, "unknown_run" | "not_retryable">>;
  abandonDispatches(dispatches: Dispatch[]): Promise<Array<"redispatched" | "stale">>;
  /** A breaker is open for these dispatches' origin: their runs wait until `until`, attempts unspent. */
  holdDispatches(holds: Array<Dispatch & { until: number; reason: string }>): Promise<Array<"held" | "stale">>;
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
