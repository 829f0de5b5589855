import { breakerKey } from "../gate/breaker";
import { scheduledRunId } from "../model/ids";
import { DEFAULT_RETRY } from "../model/job";
import { retryDelay } from "../schedule/backoff";
import { isWorkflowRun, stepPolicy, targetOfRun } from "../workflow/steps";
import { underFlowControl } from "./admission";
import { type Answer, type AttemptRow, type Dispatch, done, type KeyedDispatch, LEASE_GRACE_MS, type RunRow, refuse } from "./contract";
import { claimWait, QueueProgress } from "./queue-progress";
import type { RunToWrite, ShardJob } from "./rows";
import { afterFailure, classifyStatus, DEAD_LETTER_STATES, type FailureKind } from "./run-states";
import type { AttemptChange, RunChanges, ShardStore } from "./store";

/** The job's timeout when its row is gone (job rows outlive deletion, so this is a fallback only). */
const DEFAULT_TIMEOUT_MS = 30_000;
/** Work per alarm is bounded so one alarm never runs out of CPU; what is left re-arms at once. */
export const TICK_BATCH = 2_000;
/** Claim chunks looked at per alarm: each holds at most FIRE_CHUNK (200) runs, so as many runs as TICK_BATCH. */
const CHUNKS_PER_TICK = 10;

/**
 * Where a dispatched run's claim deadline is kept: its own `due_at` (in runs_due), its job (a
 * frequent job's fires, frequent-jobs.ts; a fired one-off job's entry in jobs_next_due,
 * fired-through.ts), or the claim chunk of the runs dispatched with it (claim-chunks.ts).
 */
export type ClaimDeadline = "own" | "job" | "chunk";

/** What a settled outcome says, whoever reported it: the consumer, or the target itself. */
export interface Settled {
  ok: boolean;
  status: number | null;
  error: string | null;
  retryAfterMs?: number;
  result?: string | null;
  kind?: FailureKind;
}

/**
 * The run ledger: the only writer of run and attempt transitions. Every verb here is one step
 * of the state table (`run-states.ts`) applied inside the caller's transaction; a step the
 * table lacks throws, and the transaction with it. Other capabilities decide *what* happens to
 * a run (firing, admission, completion); this module is *how* it is written down.
 */
export class RunLedger {
  /**
   * Begins a workflow run's steps where another run would be dispatched (workflows.ts); set by
   * the shard once its workflows exist, since they write their step runs through this ledger.
   */
  beginSteps: (runId: string, now: number) => void = () => {};
  /** Runs created since the last `takeChunk` whose claim deadline is their chunk's (claim-chunks.ts). */
  #chunk: string[] = [];
  /** How far the queue has delivered, from the claims: a deadline of a dispatch it still holds is put off. */
  readonly queue = new QueueProgress();

  constructor(
    private readonly store: ShardStore,
    readonly claimTimeoutMs: () => number,
    /** Extends a run's tenant permit at the next flush (dispatch's, kept in memory). */
    private readonly renewPermit: (run: RunRow, leaseMs: number) => void,
    /** Sends a run's dispatch once the change commits (dispatch's, kept in memory: invariant 3). */
    private readonly send: (dispatch: KeyedDispatch) => void,
  ) {}

  /**
   * A run's dispatch, naming its target's breaker unless the job opted out. A workflow run has no
   * target of its own: it begins its steps instead, in this same transaction.
   */
  private dispatch(runId: string, fence: number, job: Pick<ShardJob, "tenantId" | "spec"> | null, now: number): void {
    if (job && isWorkflowRun(job.spec, runId)) {
      this.beginSteps(runId, now);
      return;
    }
    this.send({ runId, fence, ...breakerKey(job, job && targetOfRun(job.spec, runId)) });
  }

  /**
   * A new run, as `as` says; false (nothing written) when it exists: run ids are derived, so
   * this is what makes a repeated fire harmless (docs/architecture.md, invariant 2).
   */
  create(
    run: RunToWrite,
    now: number,
    as:
      | { state: "queued"; job: ShardJob; deadline?: ClaimDeadline }
      | { state: "waiting" }
      | { state: "buffered" }
      | { state: "skipped"; reason: string },
  ): boolean {
    if (as.state !== "queued") return this.store.createRun(run, now, as);
    const deadline = as.deadline ?? "own";
    const created = this.store.createRun(run, now, {
      state: "queued",
      claimDeadline: deadline === "own" ? now + this.claimTimeoutMs() : null,
    });
    if (created && deadline === "chunk") this.#chunk.push(run.id);
    if (created) this.dispatch(run.id, run.fence ?? 1, as.job, now);
    return created;
  }

  /** A new run for a job, held for admission when the job is under flow control; `deadline` says where its claim deadline is kept. */
  createQueuedOrWaiting(job: ShardJob, run: RunToWrite, now: number, deadline: ClaimDeadline = "own"): boolean {
    return this.create(run, now, this.mustWait(job) ? { state: "waiting" } : { state: "queued", job, deadline });
  }

  /** The runs created for a chunk's claim deadline since the last call: the caller writes the chunk. */
  takeChunk(): string[] {
    const runs = this.#chunk;
    this.#chunk = [];
    return runs;
  }

  /**
   * Sends a run on (`queued` with its dispatch) along `event`, or, for a job under flow
   * control, moves it to `waiting` for admission. `changes` apply either way.
   */
  sendOn(run: RunRow, event: "start" | "requeue" | "revive", changes: RunChanges, now: number): void {
    const job = this.store.getJob(run.jobId);
    // A workflow's step is part of a run flow control already let through: it never waits.
    if (job && run.parentRunId === null && this.mustWait(job)) {
      this.store.moveRun(run, "hold", { ...changes, dueAt: now });
      return;
    }
    const next = this.store.moveRun(run, event, { ...changes, dueAt: now + this.claimTimeoutMs(), redispatches: 0 });
    this.dispatch(next.id, next.fence, job, now);
  }

  /**
   * A waiting run that flow control (or its origin's breaker) let through, holding `permit` if
   * its tenant has a limit. Why it waited (`error`, for a breaker) is no longer so.
   */
  admit(run: RunRow, job: ShardJob, permit: string | null, now: number): void {
    const next = this.store.moveRun(run, "admit", { dueAt: now + this.claimTimeoutMs(), permit, redispatches: 0, error: null });
    this.dispatch(next.id, next.fence, job, now);
  }

  /** A circuit breaker is open for the run's origin: it waits until `until`, its attempt unspent (its dispatch is stale now). */
  holdForBreaker(run: RunRow, until: number, reason: string): void {
    this.store.moveRun(run, "hold", { dueAt: until, error: reason });
  }

  /**
   * Ends an unfinished run as cancelled; an attempt in flight is closed, its late outcome stale.
   * A dispatch of it still unsent goes out and is stale at its claim.
   */
  cancel(run: RunRow, reason: string, now: number): void {
    // A running workflow run has no attempt of its own: its steps have theirs.
    const attempt =
      run.state === "running" && !isWorkflowRun(this.store.getJob(run.jobId)?.spec ?? {}, run.id)
        ? finished("cancelled", now, null, reason)
        : undefined;
    this.store.moveRun(run, "cancel", { dueAt: null, finishedAt: now, error: reason }, attempt);
  }

  /**
   * A paused or deleted job: every run of it that has not begun an attempt ends now. A pause
   * leaves a workflow's steps under way to finish, retries included (docs/workflows.md).
   */
  cancelPending(jobId: string, reason: string, now: number): void {
    const deleted = this.store.getJob(jobId)?.deleted ?? true;
    for (const run of this.store.pendingRuns(jobId)) {
      if (deleted || run.parentRunId === null) this.cancel(run, reason, now);
    }
  }

  /**
   * The consumer claimed the current dispatch: an attempt starts, its lease with it. The run's
   * due_at stays its claim deadline, so the claim moves nothing in runs_due; when that comes
   * with the attempt still running, `advanceDue` looks at the lease (docs/cost.md).
   */
  claim(run: RunRow, job: ShardJob, now: number, completionToken: string): void {
    // The run executes the job as it is now; it records that version (a PATCH may have come).
    this.store.moveRun(
      run,
      "claim",
      {
        leaseUntil: now + stepPolicy(job.spec, run.id).timeoutMs + LEASE_GRACE_MS,
        startedAt: run.startedAt ?? now,
        jobVersion: job.version,
      },
      { start: { attempt: run.attempt, fence: run.fence, startedAt: now, completionToken } },
    );
    // A run's own permit was leased for its first attempt when it was admitted; a workflow run
    // holds one while its steps run, so each step's claim extends it by that step's lease.
    if (run.parentRunId !== null) this.renewCover(run, stepPolicy(job.spec, run.id).timeoutMs + LEASE_GRACE_MS);
  }

  /** Extends the tenant permit that covers `run`: its own, or a step's workflow run's. */
  private renewCover(run: RunRow, leaseMs: number): void {
    const holder = run.parentRunId === null ? run : this.store.getRun(run.parentRunId);
    if (holder?.permit) this.renewPermit(holder, leaseMs);
  }

  /** The target answered 202: the lease restarts from its answer, and heartbeats extend it. */
  accept(run: RunRow, status: number, now: number): void {
    const leaseMs = this.timeoutOf(run) + LEASE_GRACE_MS;
    this.store.attempts.accept(run.id, run.fence, status, now + leaseMs);
    this.renewCover(run, leaseMs);
  }

  extendLease(run: RunRow, until: number, permitLeaseMs: number): void {
    this.store.extendLease(run.id, until);
    this.renewCover(run, permitLeaseMs);
  }

  /** The outcome of the running attempt: success ends the run; a failure retries or ends it. */
  settle(run: RunRow, o: Settled, now: number): void {
    const attempt = finished(o.ok ? "succeeded" : "failed", now, o.status, o.error);
    if (o.ok) {
      const changes = { dueAt: null, finishedAt: now, status: o.status, error: null, result: o.result ?? null };
      this.store.moveRun(run, "succeed", changes, attempt);
    } else {
      this.fail(run, attempt, o.status, o.error, now, o.retryAfterMs, o.kind);
    }
  }

  /**
   * The Queue gave up on this dispatch (its dead-letter queue), which happens when deliveries
   * or claims kept failing, e.g. while the shard restarted: nothing is wrong with the run. It
   * stays queued and its dispatch is sent again at once, as at a claim deadline; a run
   * never ends failed only because its shard was briefly unreachable. No terminal outcome
   * remains for this: the redispatch backoff caps what a dispatch that is never claimed costs,
   * the count and the note make it visible, and pausing the job ends it.
   */
  abandon(run: RunRow, now: number): void {
    const next = this.store.moveRun(run, "abandon", {
      error: `the queue dead-lettered this attempt's dispatch after repeated delivery failures; sent again (${run.redispatches + 1} redispatches)`,
    });
    // Lost for certain: sent again now, however far behind the queue seems to be.
    this.dueCame(next, this.store.getJob(run.jobId), now, "lost");
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

  /**
   * A success reported for the timed-out last attempt of a run that is dead because of that
   * timeout: the target did the work, its outcome was only late (a report lost or retried, a
   * slow consumer), so the run is `succeeded` rather than a false dead letter. Only within
   * `LATE_SUCCESS_WINDOW_MS` of the run ending, and only while nothing happened since: the
   * fence still names that attempt (a revival raises it, so a late answer can never overwrite
   * a run a person already started again; docs/architecture.md, invariant 4). A late failure,
   * or a late success of an attempt that was retried, changes nothing: a retry is already
   * under way or done, and delivery is at least once. The attempt stays `timed_out` with the
   * late answer noted, which is what happened. True when the run was revived as succeeded.
   */
  succeedLate(runId: string, fence: number, o: Settled, now: number): boolean {
    const run = this.store.getRun(runId);
    const attempt = this.store.attempts.get(runId, fence);
    if (!o.ok || !run || run.state !== "dead" || run.fence !== fence || attempt?.outcome !== "timed_out") return false;
    // A workflow's step stays dead: the graph has already decided on it (steps below skipped or
    // started), and a step that changed its outcome now would contradict those decisions.
    if (run.parentRunId !== null) return false;
    if (run.finishedAt === null || now - run.finishedAt > LATE_SUCCESS_WINDOW_MS) return false;
    this.store.moveRun(run, "succeed_late", { status: o.status, error: null, result: o.result ?? null });
    return true;
  }

  /** A late outcome is kept on the attempt it belongs to, so the run shows it happened. */
  noteLate(runId: string, fence: number, description: string): void {
    this.store.attempts.noteLate(runId, fence, description);
  }

  /** Runs whose due time passed: unclaimed dispatches go out again, retries start, expired leases fail. */
  advanceDue(now: number): void {
    for (const run of this.store.dueRuns(now, TICK_BATCH)) this.dueCame(run, this.store.getJob(run.jobId), now);
    // Chunks whose claim deadline came: each run still without a due time of its own is looked at.
    for (const chunk of this.store.claimChunks.due(now, CHUNKS_PER_TICK)) {
      for (const run of this.store.getRuns(chunk.runs)) if (awaitsDeadline(run)) this.dueCame(run, this.store.getJob(run.jobId), now);
      this.store.claimChunks.remove(chunk);
    }
    this.checkFiredJobs(now);
  }

  /**
   * Entries a claim timeout behind the alarm's position (fired-through.ts): the run of the fire
   * each one names is looked at as a due run if its claim deadline is the entry's. Stops at the
   * first run whose deadline is still to come.
   */
  private checkFiredJobs(now: number): void {
    const timeout = this.claimTimeoutMs();
    const through = this.store.firedThrough;
    for (const entry of through.awaitingCheck(now - timeout, TICK_BATCH)) {
      const run = this.store.getRun(scheduledRunId(entry.jobId, entry.fireAt));
      if (run && awaitsDeadline(run)) {
        if (run.createdAt + timeout > now) {
          through.checkAt(run.createdAt + timeout);
          return;
        }
        this.dueCame(run, this.store.getJob(run.jobId), now);
      }
      through.checked(entry);
    }
  }

  /** The job's row's entry, behind the alarm's position, moves (a change, a fire writing the row): the run it fired (`firedAt`) gets a deadline of its own. */
  leaveFired(job: ShardJob): void {
    if (job.firedAt === null) return;
    const run = this.store.getRun(scheduledRunId(job.id, job.firedAt));
    if (run && awaitsDeadline(run)) this.store.setDueAt(run.id, run.createdAt + this.claimTimeoutMs());
  }

  /**
   * A frequent job's fire looks at the claim deadlines of its runs fired since `from`
   * (frequent-jobs.ts): each one whose deadline has come is handled as a due run is. Returns
   * the earliest fire its next fire has still to look at.
   */
  claimDeadlinesOf(job: ShardJob, from: number, now: number): number {
    const timeout = this.claimTimeoutMs();
    // A run fired at `at` was created at `at` or later, so none fired after now - timeout is due yet.
    let next = now - timeout + 1;
    for (const run of this.store.frequent.awaitingDeadline(job.id, from, now - timeout)) {
      if (run.createdAt + timeout > now) next = Math.min(next, run.scheduledAt);
      else this.dueCame(run, job, now);
    }
    return next;
  }

  /**
   * A run's due time came: a claim deadline, a lease's end, a retry, a breaker's wait. A queued
   * run's dispatch known to be `lost` is sent again even while the queue seems behind.
   */
  private dueCame(run: RunRow, job: ShardJob | null, now: number, lost?: "lost"): void {
    const stopped = stoppedFor(run, job);
    if (stopped && (run.state === "waiting" || run.state === "queued" || run.state === "retry_wait")) {
      // Normally cancelled when the pause or delete arrived; this catches any that slipped by.
      this.cancel(run, stopped, now);
    } else if (run.state === "queued") {
      // While the queue is still delivering dispatches sent before this one, it is late, not
      // lost: the deadline is put off a claim timeout, no copy sent (queue-progress.ts).
      // Otherwise the dispatch goes again. The fence stays: a dispatch the queue delays past its
      // claim deadline must still be claimable, or once queue latency exceeds the claim timeout
      // every dispatch arrives stale and nothing runs (a livelock). One claim still wins, since
      // it takes the run out of `queued` (docs/architecture.md, invariants 4 and 5). The wait
      // doubles with each redispatch, capped, so a slow queue is not flooded with copies.
      const late = !lost && this.queue.behind(run, now, this.claimTimeoutMs());
      const redispatches = run.redispatches + 1;
      const wait = late ? this.claimTimeoutMs() : claimWait(this.claimTimeoutMs(), redispatches);
      if (late) {
        this.store.setDueAt(run.id, now + wait);
      } else {
        const next = this.store.moveRun(run, "redispatch", { dueAt: now + wait, redispatches });
        this.dispatch(next.id, next.fence, job, now);
      }
      this.renewCover(run, wait + this.timeoutOf(run) + LEASE_GRACE_MS);
    } else if (run.state === "retry_wait") {
      this.sendOn(run, "requeue", { attempt: run.attempt + 1, fence: run.fence + 1 }, now);
    } else if (run.state === "running" && run.leaseUntil !== null && run.leaseUntil > now) {
      // The claim deadline came, the lease has not ended: looked at again when it does.
      this.store.setDueAt(run.id, run.leaseUntil);
    } else if (run.state === "running") {
      const error = "timed out: no outcome before the lease expired";
      this.fail(run, finished("timed_out", now, null, error), null, error, now);
    }
  }

  /** When the ledger next has work: the earliest due run, or claim deadline of a fired job. */
  nextDue(): number | null {
    const run = this.store.earliestRunDue();
    const fired = this.store.firedThrough.nextCheck(this.claimTimeoutMs());
    return run === null || fired === null ? (run ?? fired) : Math.min(run, fired);
  }

  /** The current dispatch of a queued run, or null when `d` is not it (docs/architecture.md, invariant 4). */
  currentQueued(d: Dispatch): RunRow | null {
    const run = this.store.getRun(d.runId);
    return run && run.fence === d.fence && run.state === "queued" ? run : null;
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
      this.store.moveRun(run, "cancel", changes, attempt);
    } else if (decision === "retry") {
      const delay = Math.max(retryDelay(run.attempt + 1, retry.backoff, retry.jitter), retryAfterMs);
      this.store.moveRun(run, "retry", { dueAt: now + delay, status, error }, attempt);
    } else {
      this.store.moveRun(run, decision, { dueAt: null, finishedAt: now, status, error }, attempt);
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
export const LATE_SUCCESS_WINDOW_MS = 10 * 60_000;

/** Why nothing more may run for this job, or null when it is live. */
export function stoppedReason(job: Pick<ShardJob, "paused" | "deleted"> | null): string | null {
  if (!job || job.deleted) return "job deleted";
  return job.paused ? "job paused" : null;
}

/**
 * Why nothing more may run for this run: a workflow's step goes on while its job is paused (the
 * steps in flight finish, with their retries), and ends only with the job.
 */
export function stoppedFor(run: Pick<RunRow, "parentRunId">, job: Pick<ShardJob, "paused" | "deleted"> | null): string | null {
  const stopped = stoppedReason(job);
  return run.parentRunId !== null && stopped === "job paused" ? null : stopped;
}

/** A dispatched or running run with no due time of its own: its claim deadline is kept elsewhere (`ClaimDeadline`). */
function awaitsDeadline(run: RunRow): boolean {
  return run.dueAt === null && (run.state === "queued" || run.state === "running");
}

/** The running attempt ends with `outcome`. */
function finished(outcome: AttemptRow["outcome"], now: number, status: number | null, error: string | null): AttemptChange {
  return { finish: { outcome, finishedAt: now, status, error } };
}
