import { LATE_NOTED_OUTCOMES, LIVE_ATTEMPT_OUTCOMES } from "../model/attempt-states";
import { parseCompletionToken } from "../model/ids";
import type { Dispatch, LeaseToRenew, Outcome, RunOrder } from "../protocol/queue-messages";
import { type Answer, type Completion, done, type OpenResult, refuse, type TokenRefusal } from "../protocol/shard-rpc";
import type { RunRow } from "../protocol/stored-rows";
import { targetOfRun } from "../workflow/steps";
import { runningLeaseMs, waitingLeaseMs } from "./lease-length";
import type { RunLedger } from "./ledger";
import { runOrder, signingOf } from "./orders";
import type { ShardStore } from "./store";
import type { Workflows } from "./workflows";

/**
 * The most of orders one `open` answers, as JSON (at least one order): an order that travels
 * without its message holds a target's body, up to 1 MiB for a QStash message, and a batch may
 * hold 100 of them; answered whole, they were 140 MB for a consumer with 128 MB. Those past it
 * are answered `later`: the consumer has them come again.
 */
export const OPEN_ANSWER_BYTES = 4_000_000;

/**
 * Completion: the consumer's side of a run and the long-running target's. An attempt begins
 * when its run is dispatched (ledger.ts); an outcome, a completion or a heartbeat counts only
 * for the current attempt (docs/architecture.md, invariants 4 and 5). Anything stale changes
 * nothing, except that a late outcome of an attempt the shard gave up on is kept on it.
 */
export class Completions {
  constructor(
    private readonly store: ShardStore,
    private readonly ledger: RunLedger,
    private readonly workflows: Pick<Workflows, "inputOf">,
  ) {}

  /**
   * The orders of leased attempts whose dispatch travelled without one (too large for a queue
   * message, dispatch-packs.ts): read from the run as its dispatch left it. Writes nothing: the
   * attempt began when it was dispatched. A dispatch that names the end of its lease is opened
   * only while that is the run's lease: a copy from before the shard sent it again (a queue's
   * backlog) is stale, since the copy sent again carries the attempt now.
   */
  open(dispatches: Array<Dispatch & { leaseUntil?: number }>): OpenResult[] {
    let bytes = 0;
    return dispatches.map((d): OpenResult => {
      const leased = this.ledger.currentLease(d);
      const run = leased && (d.leaseUntil === undefined || d.leaseUntil === leased.leaseUntil) ? leased : null;
      const job = run && this.store.getJob(run.jobId);
      const target = job && targetOfRun(job.spec, d.runId);
      const attempt = run && this.store.attempts.runAndAttempt(run.id, run.fence).attempt;
      if (!run || !job || !target || !attempt) return { result: "stale", runId: d.runId, fence: d.fence };
      const signing = signingOf(this.store.getTenant(job.tenantId));
      const input = run.parentRunId === null ? null : this.workflows.inputOf(run, job);
      const order = runOrder(run, job, target, signing, attempt.completionToken, input, run.leaseUntil);
      // The answer is a page: an order that would take it past OPEN_ANSWER_BYTES is to be asked for again.
      const size = JSON.stringify(order).length;
      if (bytes > 0 && bytes + size > OPEN_ANSWER_BYTES) return { result: "later", runId: d.runId, fence: d.fence };
      bytes += size;
      return { result: "open", ...order };
    });
  }

  /**
   * The order of `runId`'s attempt under `fence` if its shard timed it out and nothing happened
   * since (a revival raises the fence): what its failure callback tells of. Writes nothing.
   */
  timedOutOrder(runId: string, fence: number): RunOrder | null {
    const { run, attempt } = this.store.attempts.runAndAttempt(runId, fence);
    if (!run || run.fence !== fence || attempt?.outcome !== "timed_out") return null;
    const job = this.store.getJob(run.jobId);
    const target = job && targetOfRun(job.spec, runId);
    if (!job || !target) return null;
    return runOrder(run, job, target, signingOf(this.store.getTenant(job.tenantId)), attempt.completionToken, null, null);
  }

  /**
   * Each run's outcome is recorded once; an outcome for any fence but the current running one is
   * stale, a late success of an attempt given up on too: the run's end already brought its
   * consequences (a failure chain, a dead notification, a step of an auto-pause streak), which an
   * outcome overwritten afterwards would contradict. It is noted on its attempt.
   */
  report(outcomes: Outcome[], now: number): Array<"recorded" | "stale"> {
    return outcomes.map((o) => {
      const { run, attempt } = this.store.attempts.runAndAttempt(o.runId, o.fence);
      if (!run || !attempt || run.fence !== o.fence || run.state !== "running" || attempt.outcome !== "running") {
        if (attempt && LATE_NOTED_OUTCOMES.includes(attempt.outcome)) this.ledger.noteLate(o.runId, o.fence, describeOutcome(o));
        return "stale";
      }
      if (o.accepted) this.ledger.accept(run, o.status ?? 202, now);
      else this.ledger.settle(run, o, now);
      return "recorded";
    });
  }

  /** The end of a long-running attempt, reported by the target itself. */
  complete(runId: string, token: string, completion: Completion, now: number): Answer<RunRow, TokenRefusal> {
    const late = completion.ok ? "completed: succeeded" : `completed: failed${completion.error ? `: ${completion.error}` : ""}`;
    const checked = this.checkToken(runId, token, late);
    if (!checked.ok) return checked;
    this.ledger.settle(
      checked.value,
      {
        ok: completion.ok,
        status: null,
        error: completion.ok ? null : (completion.error ?? "the target reported a failure"),
        result: completion.result ?? null,
        kind: completion.retry === false ? "permanent" : "retryable",
      },
      now,
    );
    return checked;
  }

  /** Extends a long-running attempt's lease to `extendMs` from now. */
  heartbeat(runId: string, token: string, extendMs: number, now: number): Answer<{ leaseUntil: number }, TokenRefusal> {
    const checked = this.checkToken(runId, token, "heartbeat");
    if (!checked.ok) return checked;
    this.ledger.extendLease(checked.value, now + extendMs, runningLeaseMs(extendMs));
    return done({ leaseUntil: now + extendMs });
  }

  /**
   * Leases of dispatched attempts whose orders still wait, at their consumer, for a connection
   * (src/consumer/lease-keeper.ts): each still the lease its order knows, not yet ended, is
   * renewed for a while more (`waitingLeaseMs`) and its new end answered; any other is null (the
   * attempt has its outcome, or was replaced, or its lease ended and its dispatch may have been
   * sent again: that order must not start).
   */
  renewLeases(leases: LeaseToRenew[], now: number): Array<number | null> {
    return leases.map((l) => {
      const run = this.ledger.currentLease(l);
      if (!run || run.leaseUntil !== l.leaseUntil || l.leaseUntil <= now) return null;
      const leaseMs = waitingLeaseMs(this.ledger.timeoutOf(run));
      this.ledger.extendLease(run, now + leaseMs, leaseMs);
      return now + leaseMs;
    });
  }

  /**
   * Dispatches whose origin's circuit breaker is open: their runs wait until `until`, attempts
   * unspent; or, the origin down past the breaker's longest hold (`giveUp`), end dead uncalled.
   */
  hold(holds: Array<Dispatch & { until: number; reason: string; giveUp?: boolean }>, now: number): Array<"held" | "stale"> {
    return holds.map((h) => {
      const run = this.ledger.currentLease(h);
      if (!run) return "stale";
      if (h.giveUp) this.ledger.giveUpForBreaker(run, h.reason, now);
      else this.ledger.holdForBreaker(run, h.until, h.reason, now);
      return "held";
    });
  }

  /**
   * Dispatches the Queue gave up on (its dead-letter queue): their runs are dispatched again, not
   * failed, while their attempts have resends left and their jobs may run; else the attempt ends
   * as a lost one (ledger.ts, `abandon`).
   */
  abandon(dispatches: Dispatch[], now: number): Array<"redispatched" | "ended" | "stale"> {
    return dispatches.map((d) => {
      const run = this.ledger.currentLease(d);
      return run ? this.ledger.abandon(run, now) : "stale";
    });
  }

  /**
   * Checks a completion token against the run's current attempt. A token of an earlier attempt
   * is stale (and its outcome is noted on that attempt); anything else unknown is invalid.
   */
  private checkToken(runId: string, token: string, lateOutcome: string): Answer<RunRow, TokenRefusal> {
    const run = this.store.getRun(runId);
    if (!run) return refuse("unknown_run");
    const fence = parseCompletionToken(token)?.fence;
    const attempt = fence === undefined ? null : this.store.attempts.get(runId, fence);
    if (!attempt || !sameToken(attempt.completionToken, token)) return refuse("invalid_token");
    const live = run.fence === fence && run.state === "running" && LIVE_ATTEMPT_OUTCOMES.includes(attempt.outcome);
    if (!live) {
      if (LATE_NOTED_OUTCOMES.includes(attempt.outcome)) this.ledger.noteLate(runId, attempt.fence, lateOutcome);
      return refuse("stale");
    }
    return done(run);
  }
}

/** Constant-time comparison of a presented token with the stored one (same length by format). */
function sameToken(stored: string, presented: string): boolean {
  const a = new TextEncoder().encode(stored);
  const b = new TextEncoder().encode(presented);
  return a.byteLength === b.byteLength && crypto.subtle.timingSafeEqual(a, b);
}

/** How a stale outcome is noted on the attempt it belonged to. */
function describeOutcome(o: Outcome): string {
  if (o.accepted) return `HTTP ${o.status ?? 202}: accepted`;
  return o.ok ? `HTTP ${o.status}` : (o.error ?? `HTTP ${o.status}`);
}
