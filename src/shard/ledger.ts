import { DEFAULT_RETRY } from "../model/job";
import { retryAfterCap } from "../model/retry-after";
import { afterFailure, classifyStatus, DEAD_LETTER_STATES, type FailureKind } from "../model/run-states";
import type { Dispatch } from "../protocol/queue-messages";
import { type Answer, done, refuse } from "../protocol/shard-rpc";
import type { AttemptRow, RunRow } from "../protocol/stored-rows";
import { retryDelayMs } from "../qstash/retry-delay";
import { retryDelay } from "../schedule/backoff";
import { isWorkflowRun, stepPolicy, targetOfRun } from "../workflow/steps";
import { underFlowControl, watchesOpenRuns } from "./admission";
import { AttemptStarts, type WorkflowSteps } from "./attempt-starts";
import type { ShardHost } from "./host";
import { runningLeaseMs } from "./lease-length";
import { MAX_REDISPATCHES } from "./leases";
import type { DispatchOutbox, Settled } from "./ledger-ports";
import type { RunToWrite, ShardJob } from "./rows";
import { type RunMoveHooks, RunMoves } from "./run-moves";
import { stoppedFor, stoppedReason } from "./run-stops";
import type { AttemptChange, RunChanges } from "./run-writes";
import type { ShardStore } from "./store";

/** The job's timeout when its row is gone (job rows outlive deletion, so this is a fallback only). */
const DEFAULT_TIMEOUT_MS = 30_000;
/** Work per alarm is bounded so one alarm never runs out of CPU; what is left re-arms at once. */
export const TICK_BATCH = 2_000;

/**
 * The run ledger: the only writer of run and attempt transitions. Every verb here is one step
 * of the state table (`run-states.ts`) applied inside the caller's transaction, through
 * `RunMoves` (run-moves.ts: the step's effects); a step the table lacks throws, and the
 * transaction with it. Other capabilities decide *what* happens to a run (firing, admission,
 * completion, workflows); this module is *how* it is written down.
 */
export class RunLedger {
  private readonly moves: RunMoves;
  private readonly starts: AttemptStarts;

  constructor(
    host: Pick<ShardHost, "name" | "claimTimeoutMs">,
    private readonly store: ShardStore,
    /** Where dispatches go out once the change commits (dispatch.ts). */
    private readonly outbox: DispatchOutbox,
    /** Who hears of each run's steps and ends (counters, workflows, outcomes). */
    hooks: RunMoveHooks,
  ) {
    this.moves = new RunMoves(store, hooks);
    this.starts = new AttemptStarts(host, store, this.moves, outbox);
  }

  /** Workflow runs begin their steps where another run is dispatched (workflows.ts): set once workflows exist, which write their step runs through this ledger. */
  useWorkflows(steps: WorkflowSteps): void {
    this.starts.steps = steps;
  }

  /** A workflow run begins its steps: it is running, with no attempt of its own (workflows.ts). */
  beginWorkflow(run: RunRow, now: number): RunRow {
    return this.moves.move(run, "begin_steps", { dueAt: null, startedAt: run.startedAt ?? now, redispatches: 0, error: null }, now);
  }

  /** Every step of a workflow run ended: it succeeded, or failed naming the steps that failed. */
  endWorkflow(run: RunRow, failedSteps: string[], now: number): void {
    if (failedSteps.length === 0) this.moves.move(run, "succeed", { dueAt: null, finishedAt: now, error: null }, now);
    else this.moves.move(run, "reject", { dueAt: null, finishedAt: now, error: `failed steps: ${failedSteps.join(", ")}` }, now);
  }

  /**
   * A new run, as `as` says; false (nothing written) when it exists: run ids are derived, so
   * this is what makes a repeated fire harmless (docs/architecture.md, invariant 2). A run
   * created to start is dispatched and leased by its insert.
   */
  create(
    run: RunToWrite,
    now: number,
    as:
      | { state: "queued"; job: ShardJob }
      | { state: "waiting"; parkedFor?: string }
      | { state: "buffered" }
      | { state: "skipped"; reason: string },
  ): boolean {
    if (as.state !== "queued") return this.store.fires.createRun(run, now, as);
    const job = as.job;
    const target = targetOfRun(job.spec, run.id);
    if (isWorkflowRun(job.spec, run.id) || !target) {
      const created = this.store.fires.createRun(run, now, { state: "queued" });
      const row = created ? this.store.getRun(run.id) : null;
      if (row) this.starts.start(row, [], {}, job, now);
      return created;
    }
    return this.starts.createDispatched(run, job, target, now);
  }

  /**
   * Tenant permits granted before the fire for runs it is about to make (`Admitter.grantAhead`),
   * by run id: such a run is made dispatched, holding its permit, instead of waiting to be
   * admitted. What the fire takes is removed; what is left over is the caller's to give back.
   */
  grantedAhead = new Map<string, string>();

  /**
   * Tenants with runs parked here when the fire began: a run of theirs that must wait is made
   * parked, at the tail of their line, in its insert (what admission would do with it next, a
   * second write: admitter.ts), not written waiting and due first.
   */
  parkAtFire = new Set<string>();

  /** A new run for a job, held for admission when the job is under flow control, unless its permit was granted ahead. */
  createQueuedOrWaiting(job: ShardJob, run: RunToWrite, now: number): boolean {
    const permit = this.grantedAhead.get(run.id);
    if (permit !== undefined) {
      this.grantedAhead.delete(run.id);
      // Watched for its tenant's limit alone, a run made dispatched stays out of runs_open: the
      // open runs a pause looks for are pending ones, and this one parks (and is watched) only if a
      // retry of it must wait for a place (admission-store.ts, `park`).
      return this.create({ ...run, permit, watched: run.watched && watchesOpenRuns(job.spec, null) }, now, { state: "queued", job });
    }
    if (!this.mustWait(job)) return this.create(run, now, { state: "queued", job });
    const parks = run.parentRunId === undefined && this.parkAtFire.has(job.tenantId);
    return this.create(run, now, parks ? { state: "waiting", parkedFor: job.tenantId } : { state: "waiting" });
  }

  /**
   * Starts a run along `event` (its attempt dispatched and leased), or, for a job under flow
   * control, moves it to `waiting` for admission. `changes` apply either way.
   */
  sendOn(run: RunRow, event: "start" | "requeue" | "revive", changes: RunChanges, now: number): void {
    const job = this.store.getJob(run.jobId);
    // A workflow's step is part of a run flow control already let through: it never waits.
    if (job && run.parentRunId === null && this.mustWait(job)) {
      this.moves.move(run, "hold", { ...changes, dueAt: now }, now);
      return;
    }
    this.starts.start(run, [event], changes, job, now);
  }

  /**
   * A waiting run that flow control (or its origin's breaker) let through, holding `permit` if
   * its tenant has a limit. Why it waited (`error`, for a breaker) is no longer so.
   */
  admit(run: RunRow, job: ShardJob, permit: string | null, now: number): void {
    this.starts.start(run, ["admit"], { permit, error: null }, job, now);
  }

  /**
   * A circuit breaker is open for the run's origin, and the consumer held its dispatch before
   * calling the target: the run waits until `until`, the attempt its dispatch began undone, so
   * none is spent.
   */
  holdForBreaker(run: RunRow, until: number, reason: string, now: number): void {
    this.moves.move(run, "hold", { dueAt: until, error: reason, leaseUntil: null }, now, { undo: true });
  }

  /**
   * Resends whose permits their gate gave away (attempt-starts.ts, `redispatch`): each run still
   * running that attempt, unsent, ends it as a lost one, as a lease that ends past its resends
   * does: its target may have been called (a consumer that died before it reported), so the
   * attempt is not undone but ends `timed_out`, and the job's retry policy decides what comes
   * next. A retry's attempt is admitted like any other (`hold` to `waiting`, a new permit under
   * its new fence), so it waits for a place; attempts stay numbered once each, and a late copy of
   * the lost dispatch reports stale (docs/architecture.md, invariant 10).
   */
  endForPermit(dispatches: readonly Dispatch[], now: number): void {
    const fences = new Map(dispatches.map((d) => [d.runId, d.fence]));
    const error = "timed out: its dispatch was lost, and its permit lapsed and was given to another run meanwhile";
    for (const run of this.store.getRuns([...fences.keys()])) {
      if (run.state !== "running" || run.fence !== fences.get(run.id)) continue;
      if (this.store.attempts.runAndAttempt(run.id, run.fence).attempt?.outcome !== "running") continue;
      this.fail(run, finished("timed_out", now, null, error), null, error, now);
    }
  }

  /**
   * The run's origin has been down longer than a breaker holds runs (src/gate/breaker.ts,
   * MAX_HOLD_MS): it ends dead, its target not called (the attempt its dispatch began undone),
   * rather than wait on behind an origin that may never return.
   */
  giveUpForBreaker(run: RunRow, reason: string, now: number): void {
    this.moves.move(run, "exhaust", { dueAt: null, finishedAt: now, error: reason, leaseUntil: null }, now, { undo: true });
  }

  /**
   * Ends an unfinished run as cancelled; an attempt in flight is closed, its late outcome stale
   * (a dispatch of it already sent still calls its target: the report is then stale).
   */
  cancel(run: RunRow, reason: string, now: number): void {
    // A running workflow run has no attempt of its own: its steps have theirs.
    const attempt =
      run.state === "running" && !isWorkflowRun(this.store.getJob(run.jobId)?.spec ?? {}, run.id)
        ? finished("cancelled", now, null, reason)
        : undefined;
    this.moves.move(run, "cancel", { dueAt: null, finishedAt: now, error: reason }, now, attempt);
  }

  /**
   * A paused or deleted job: every run of it that has not begun an attempt ends now. A pause
   * leaves a workflow's steps under way to finish, retries included (docs/workflows.md).
   */
  cancelPending(jobId: string, reason: string, now: number): void {
    const deleted = this.store.getJob(jobId)?.deleted ?? true;
    const cancels = (run: RunRow) => deleted || run.parentRunId === null;
    for (const run of this.store.fires.pendingRuns(jobId)) if (cancels(run)) this.cancel(run, reason, now);
    // A dispatch the Queue has not taken yet reached no consumer: its attempt has not really
    // begun, so it is withdrawn and its run ends with the others. (Should this change roll back,
    // the withdrawn dispatch is lost like one a crash loses, and its lease sends it again.)
    const unsent = new Map(this.outbox.unsentOf(jobId).map((d) => [d.runId, d]));
    for (const run of this.store.getRuns([...unsent.keys()])) {
      const dispatch = unsent.get(run.id)!;
      if (run.state !== "running" || run.fence !== dispatch.fence || !cancels(run)) continue;
      this.outbox.withdraw(dispatch);
      this.cancel(run, reason, now);
    }
  }

  /** The target answered 202: the lease restarts from its answer, and heartbeats extend it. */
  accept(run: RunRow, status: number, now: number): void {
    const leaseMs = runningLeaseMs(this.timeoutOf(run));
    this.store.attempts.accept(run.id, run.fence, status, now + leaseMs);
    // Likely sooner than the dispatch's lease, which allowed for the queue: looked at then.
    this.store.leases.lease(run.id, run.fence, now + leaseMs);
    this.starts.renewCover(run, leaseMs);
  }

  extendLease(run: RunRow, until: number, permitLeaseMs: number): void {
    this.store.attempts.extendLease(run.id, until);
    this.starts.renewCover(run, permitLeaseMs);
  }

  /** The outcome of the running attempt: success ends the run; a failure retries or ends it. */
  settle(run: RunRow, o: Settled, now: number): void {
    const attempt = finished(o.ok ? "succeeded" : "failed", now, o.status, o.error);
    // Another machine's clock: kept within the run's life as this shard saw it.
    if (o.startedAt !== undefined) attempt.finish.startedAt = Math.min(now, Math.max(run.createdAt, o.startedAt));
    if (o.ok) {
      const changes = { dueAt: null, finishedAt: now, status: o.status, error: null, result: o.result ?? null };
      this.moves.move(run, "succeed", changes, now, attempt);
    } else {
      this.fail(run, attempt, o.status, o.error, now, o.retryAfterMs, o.kind);
    }
  }

  /**
   * The Queue gave up on this dispatch (its dead-letter queue), which happens when deliveries
   * or claims kept failing, e.g. while the shard restarted: nothing is wrong with the run. It
   * stays running and its dispatch is sent again at once, as when its lease ends, and under the
   * same cap: MAX_REDISPATCHES resends per attempt in all, of either kind, so a dispatch that
   * poisons every delivery is not sent for ever; past it, or once the job is paused or
   * deleted, the attempt ends as a lost one (`resendOrEnd`). Returns whether it went out again.
   */
  abandon(run: RunRow, now: number): "redispatched" | "ended" {
    const lost = "the queue dead-lettered this attempt's dispatch after repeated delivery failures";
    return this.resendOrEnd(run, "abandon", `${lost}; sent again (${run.redispatches + 1} redispatches)`, lost, now);
  }

  /**
   * A running attempt's dispatch was lost (its lease ended with no outcome, or the Queue
   * dead-lettered it): it goes out again under the same fence while the attempt has resends
   * left (MAX_REDISPATCHES, counted per attempt whatever lost it) and its job may run.
   * Otherwise it ends as the state table says of a lost attempt: timed out, then retried or
   * ended by the job's retry policy (cancelled when the job is paused or deleted). A workflow
   * step a PATCH took out of the graph has no target to send to: its run ends cancelled, as
   * one that had not started does (attempt-starts.ts, `start`), and its workflow run moves on.
   */
  private resendOrEnd(
    run: RunRow,
    event: "redispatch" | "abandon",
    note: string | null,
    lost: string,
    now: number,
  ): "redispatched" | "ended" {
    const job = this.store.getJob(run.jobId);
    if (!job || !targetOfRun(job.spec, run.id)) {
      this.cancel(run, "its step was removed from the job's steps while its attempt was in flight", now);
      return "ended";
    }
    if (run.redispatches < MAX_REDISPATCHES && !stoppedFor(run, job)) {
      this.starts.redispatch(run, event, note === null ? {} : { error: note }, now);
      return "redispatched";
    }
    const error = run.redispatches < MAX_REDISPATCHES ? lost : `${lost}; not sent again after ${MAX_REDISPATCHES} resends`;
    this.fail(run, finished("timed_out", now, null, error), null, error, now, this.timedOutRetryMs(run));
    return "ended";
  }

  /**
   * How long a run whose attempt the shard itself timed out waits for its retry: a QStash
   * message its own retry delay, which the consumer asks for with every failure it sees
   * (src/qstash/delivery.ts) and this one no consumer saw; any other run its backoff alone.
   */
  private timedOutRetryMs(run: RunRow): number {
    const meta = this.store.getJob(run.jobId)?.spec.target?.qstash;
    return meta ? retryDelayMs(run.attempt, meta.retryDelay) : 0;
  }

  /** A dead or failed run of a live job gets a fresh set of attempts. */
  revive(runId: string, now: number): Answer<RunRow, "unknown_run" | "not_retryable"> {
    const run = this.store.getRun(runId);
    if (!run) return refuse("unknown_run");
    // A workflow's step is retried with its run (POST /v1/runs/<the run>/retry), never alone.
    if (!this.revivable(run)) return refuse("not_retryable");
    this.sendOn(run, "revive", { attempt: 1, fence: run.fence + 1, finishedAt: null, status: null, error: null }, now);
    return done(run);
  }

  /** A dead or failed run of a live job, not a workflow's step: what a retry may revive. */
  revivable(run: RunRow): boolean {
    return run.parentRunId === null && !stoppedReason(this.store.getJob(run.jobId)) && DEAD_LETTER_STATES.includes(run.state);
  }

  /** A late outcome is kept on the attempt it belongs to, so the run shows it happened. */
  noteLate(runId: string, fence: number, description: string): void {
    this.store.attempts.noteLate(runId, fence, description);
  }

  /** Runs whose due time passed (retries start, admissions are looked at again), and leases that ended. */
  advanceDue(now: number): void {
    for (const run of this.store.dueRuns(now, TICK_BATCH)) this.dueCame(run, this.store.getJob(run.jobId), now);
    // LEASE_RUNS_PER_TICK at most (leases.ts): the rest stay due, and the alarm comes again at once.
    for (const slice of this.store.leases.due(now)) {
      const fences = new Map(slice.take.map((d) => [d.runId, d.fence]));
      for (const run of this.store.getRuns([...fences.keys()])) this.leaseCame(run, fences.get(run.id)!, now);
      this.store.leases.looked(slice);
    }
  }

  /**
   * The lease a run's attempt took under `fence` ended (leases.ts). An attempt that has its
   * outcome, or was replaced, is passed over; one whose lease moved on (a 202, a heartbeat) is
   * listed again for then. One with no outcome yet: its dispatch was lost, or its consumer died
   * (a consumer that lives always reports, its target's timeout is its own). It goes out again
   * under the same fence, so that whichever copy is delivered counts, up to MAX_REDISPATCHES
   * times; an accepted attempt's lease, or the last of those, ends it timed out.
   */
  private leaseCame(run: RunRow, fence: number, now: number): void {
    if (run.state !== "running" || run.fence !== fence || run.leaseUntil === null) return;
    if (run.leaseUntil > now) {
      this.store.leases.lease(run.id, fence, run.leaseUntil);
      // What moved the lease on (a 202, a heartbeat) renewed the permit from memory; this renews
      // it from storage, so a renewal lost with the object's memory is made up here.
      this.starts.renewCover(run, run.leaseUntil - now);
      return;
    }
    const { attempt } = this.store.attempts.runAndAttempt(run.id, fence);
    const error = "timed out: no outcome before the lease expired";
    if (attempt?.outcome === "running") this.resendOrEnd(run, "redispatch", null, error, now);
    else if (attempt?.outcome === "accepted")
      this.fail(run, finished("timed_out", now, null, error), null, error, now, this.timedOutRetryMs(run));
  }

  /**
   * A run's due time came: a retry, an admission's re-check, a breaker's wait; and, for a run an
   * older release dispatched, its claim deadline or lease (schema step 19 gave them one).
   */
  private dueCame(run: RunRow, job: ShardJob | null, now: number): void {
    const stopped = stoppedFor(run, job);
    if (stopped && (run.state === "waiting" || run.state === "queued" || run.state === "retry_wait")) {
      // Normally cancelled when the pause or delete arrived; this catches any that slipped by.
      this.cancel(run, stopped, now);
    } else if (run.state === "queued") {
      this.starts.start(run, [], {}, job, now);
    } else if (run.state === "retry_wait") {
      this.sendOn(run, "requeue", { attempt: run.attempt + 1, fence: run.fence + 1 }, now);
    } else if (run.state === "running") {
      this.store.setDueAt(run.id, null);
      this.leaseCame({ ...run, dueAt: null, leaseUntil: run.leaseUntil ?? now }, run.fence, now);
    }
  }

  /** When the ledger next has work: the earliest due run or lease. */
  nextDue(): number | null {
    return this.store.earliestRunDue();
  }

  /** The run of a dispatch whose attempt is still leased under its fence, or null when `d` is not it (docs/architecture.md, invariant 4). */
  currentLease(d: Dispatch): RunRow | null {
    const { run, attempt } = this.store.attempts.runAndAttempt(d.runId, d.fence);
    return run && run.fence === d.fence && run.state === "running" && attempt?.outcome === "running" ? run : null;
  }

  /**
   * Retry later, or end the run as dead (retries exhausted) or failed (the target refused).
   * A job paused or deleted while this attempt ran gets no further attempt: its run is cancelled.
   */
  private fail(
    run: RunRow,
    attempt: AttemptChange,
    status: number | null,
    error: string | null,
    now: number,
    retryAfterMs = 0,
    kind?: FailureKind,
  ): void {
    // Job rows outlive deletion (tombstones), so the policy is always there.
    const job = this.store.getJob(run.jobId);
    const retry = (job && stepPolicy(job.spec, run.id).retry) ?? DEFAULT_RETRY;
    const decision = afterFailure(kind ?? classifyStatus(status, retry.retryOn), run.attempt, retry.maxAttempts);
    const stopped = stoppedFor(run, job);
    if (decision === "retry" && stopped) {
      const changes = { dueAt: null, finishedAt: now, status, error: `${error ?? "failed"}; not retried: ${stopped}` };
      this.moves.move(run, "cancel", changes, now, attempt);
    } else if (decision === "retry") {
      // A target's Retry-After may lengthen the wait, never past what the job's policy allows.
      const cap = retryAfterCap(retry.backoff.maxMs, job !== null && targetOfRun(job.spec, run.id)?.qstash !== undefined);
      const delay = Math.max(retryDelay(run.attempt + 1, retry.backoff, retry.jitter), Math.min(retryAfterMs, cap));
      this.moves.move(run, "retry", { dueAt: now + delay, status, error }, now, attempt);
    } else {
      this.moves.move(run, decision, { dueAt: null, finishedAt: now, status, error }, now, attempt);
    }
  }

  private mustWait(job: Pick<ShardJob, "spec" | "tenantId">): boolean {
    return underFlowControl(job.spec, this.store.getTenant(job.tenantId));
  }

  timeoutOf(run: RunRow): number {
    const job = this.store.getJob(run.jobId);
    return job ? stepPolicy(job.spec, run.id).timeoutMs : DEFAULT_TIMEOUT_MS;
  }
}

/**
 * How long after a run went dead on a timed-out last attempt a late success still makes it
 * succeeded: long enough for a consumer's retried report, short enough that a dead letter
 * someone has looked at does not change under them later.
 */

/** The running attempt ends with `outcome`. */
function finished(
  outcome: AttemptRow["outcome"],
  now: number,
  status: number | null,
  error: string | null,
): Extract<AttemptChange, { finish: unknown }> {
  return { finish: { outcome, finishedAt: now, status, error } };
}
