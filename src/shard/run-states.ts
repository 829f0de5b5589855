/**
 * The run lifecycle: every state a run can be in and every transition between them, in one
 * table used by the shard and by the tests. A transition not in the table is refused.
 *
 *   queued ──claim──▶ running ──succeed──▶ succeeded
 *     ▲ │ │              │ ├──reject──▶ failed   (the target refused for good: 4xx)
 *     │ │ └redispatch    │ ├──exhaust─▶ dead     (retryable failures used every attempt)
 *     │ │                │ └──retry───▶ retry_wait ──requeue──▶ queued
 *     │ └──abandon──▶ failed  (the Queue dead-lettered the dispatch)
 *     └──revive── dead / failed   (POST /v1/runs/:id/retry: a fresh set of attempts)
 *   queued / running / retry_wait ──cancel──▶ cancelled   (job paused or deleted, run replaced)
 *   buffered ──start──▶ queued   (overlap buffer_one: the previous run ended)
 *   skipped                       (overlap forbid: born final)
 *   waiting ──admit──▶ queued    (flow control: the job's maxConcurrency or ratePerSecond, or
 *                                 the tenant's maxRunsInFlight, left room for it)
 *   retry_wait / buffered / dead / failed ──hold──▶ waiting   (instead of requeue, start or
 *                                 revive, for a job under flow control)
 * A lease that expires counts as a retryable failure of the running attempt.
 */
export const RUN_STATES = [
  "waiting",
  "queued",
  "running",
  "retry_wait",
  "buffered",
  "succeeded",
  "failed",
  "dead",
  "cancelled",
  "skipped",
] as const;
export type RunState = (typeof RUN_STATES)[number];

export type RunEvent =
  | "claim"
  | "succeed"
  | "retry"
  | "exhaust"
  | "reject"
  | "requeue"
  | "redispatch"
  | "cancel"
  | "abandon"
  | "revive"
  | "start"
  | "hold"
  | "admit";

export const TRANSITIONS: Readonly<Record<RunState, Partial<Record<RunEvent, RunState>>>> = {
  waiting: { admit: "queued", cancel: "cancelled" },
  queued: { claim: "running", redispatch: "queued", cancel: "cancelled", abandon: "failed" },
  running: { succeed: "succeeded", retry: "retry_wait", exhaust: "dead", reject: "failed", cancel: "cancelled" },
  retry_wait: { requeue: "queued", hold: "waiting", cancel: "cancelled" },
  buffered: { start: "queued", hold: "waiting", cancel: "cancelled" },
  succeeded: {},
  failed: { revive: "queued", hold: "waiting" },
  dead: { revive: "queued", hold: "waiting" },
  cancelled: {},
  skipped: {},
};

/** States a run ends in unless a person retries it (dead and failed are the dead letters). */
export const FINAL_STATES: readonly RunState[] = ["succeeded", "failed", "dead", "cancelled", "skipped"];
export const DEAD_LETTER_STATES: readonly RunState[] = ["dead", "failed"];
/** States that hold a tenant's run-in-flight permit, when it has a limit: dispatched or running. */
export const IN_FLIGHT_STATES: readonly RunState[] = ["queued", "running"];

/** The state `event` leads to from `from`, or null when the table has no such transition. */
export function transition(from: RunState, event: RunEvent): RunState | null {
  return TRANSITIONS[from][event] ?? null;
}

/** What made a run: its schedule, a person (trigger), or a backfill. */
export const RUN_TRIGGERS = ["schedule", "manual", "backfill"] as const;
export const RUN_TRIGGER_SQL_LIST = RUN_TRIGGERS.map((t) => `'${t}'`).join(", ");

/** SQL CHECK list derived from the table, so storage can never hold a state the code does not know. */
export const RUN_STATE_SQL_LIST = RUN_STATES.map((s) => `'${s}'`).join(", ");

export type FailureKind = "retryable" | "permanent";

/** After a failed attempt: try again, give up as dead (retries exhausted), or fail for good. */
export function afterFailure(kind: FailureKind, attempt: number, maxAttempts: number): "retry" | "exhaust" | "reject" {
  if (kind === "permanent") return "reject";
  return attempt < maxAttempts ? "retry" : "exhaust";
}

/**
 * Which target answers are worth another attempt: network errors and timeouts (no status),
 * 5xx, 408 Request Timeout, 429 Too Many Requests, and any 4xx the job lists. Any other
 * answer will not improve by asking again.
 */
export function classifyStatus(status: number | null, retryOn: readonly number[] = []): FailureKind {
  if (status === null || status >= 500 || status === 408 || status === 429 || retryOn.includes(status)) return "retryable";
  return "permanent";
}
