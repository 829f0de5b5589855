/**
 * The attempt lifecycle: what becomes of one call of a run's target, as one table. An attempt
 * starts `running` when its run is dispatched; a target that answers 202 makes it
 * `accepted` (the work goes on outside edgecron and completes through the API); it ends
 * succeeded, failed, timed out (its lease expired) or cancelled (its run was cancelled or
 * replaced). An ended attempt never changes again: a report or completion that comes later
 * is stale, and for timed-out and cancelled attempts it is kept on the attempt as `late`.
 *
 * docs/architecture.md draws this table; `npm run docs:diagrams` redraws it after a change.
 */
export const ATTEMPT_OUTCOMES = ["running", "accepted", "succeeded", "failed", "timed_out", "cancelled"] as const;
export type AttemptOutcome = (typeof ATTEMPT_OUTCOMES)[number];

export type AttemptEvent = "accept" | "succeed" | "fail" | "time_out" | "cancel";

export const ATTEMPT_TRANSITIONS: Readonly<Record<AttemptOutcome, Partial<Record<AttemptEvent, AttemptOutcome>>>> = {
  running: { accept: "accepted", succeed: "succeeded", fail: "failed", time_out: "timed_out", cancel: "cancelled" },
  accepted: { succeed: "succeeded", fail: "failed", time_out: "timed_out", cancel: "cancelled" },
  succeeded: {},
  failed: {},
  timed_out: {},
  cancelled: {},
};

/**
 * Not ended: what a completion or a heartbeat may act on. A consumer's report acts on
 * `running` only: once accepted, the attempt is the target's to complete.
 */
export const LIVE_ATTEMPT_OUTCOMES: readonly AttemptOutcome[] = ["running", "accepted"];
export const FINAL_ATTEMPT_OUTCOMES: readonly AttemptOutcome[] = ["succeeded", "failed", "timed_out", "cancelled"];
/**
 * Ended by the shard, not by the target: a late answer is news (a zombie finished after all)
 * and is kept on the attempt. A late answer to a succeeded or failed attempt only repeats the
 * outcome already recorded.
 */
export const LATE_NOTED_OUTCOMES: readonly AttemptOutcome[] = ["timed_out", "cancelled"];

/** The outcome `event` leads to from `from`, or null when the table has no such transition. */
export function attemptTransition(from: AttemptOutcome, event: AttemptEvent): AttemptOutcome | null {
  return ATTEMPT_TRANSITIONS[from][event] ?? null;
}
