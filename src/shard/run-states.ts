/**
 * The run lifecycle: every state a run can be in and every transition between them, in one
 * table used by the shard and by the tests. A transition not in the table is refused.
 *
 *   queued ──claim──▶ running ──succeed──▶ succeeded
 *     ▲ │                │ ├──reject──▶ failed   (the target refused for good: 4xx)
 *     │ └redispatch      │ ├──exhaust─▶ dead     (retryable failures used every attempt)
 *     │                  │ └──retry───▶ retry_wait ──requeue──▶ queued
 *     └──────────────────┘  (a lease that expires counts as a retryable failure)
 *   queued / running / retry_wait ──cancel──▶ cancelled   (job paused or deleted)
 */
export const RUN_STATES = ["queued", "running", "retry_wait", "succeeded", "failed", "dead", "cancelled"] as const;
export type RunState = (typeof RUN_STATES)[number];

export type RunEvent = "claim" | "succeed" | "retry" | "exhaust" | "reject" | "requeue" | "redispatch" | "cancel";

export const TRANSITIONS: Readonly<Record<RunState, Partial<Record<RunEvent, RunState>>>> = {
  queued: { claim: "running", redispatch: "queued", cancel: "cancelled" },
  running: { succeed: "succeeded", retry: "retry_wait", exhaust: "dead", reject: "failed", cancel: "cancelled" },
  retry_wait: { requeue: "queued", cancel: "cancelled" },
  succeeded: {},
  failed: {},
  dead: {},
  cancelled: {},
};

export const FINAL_STATES: readonly RunState[] = RUN_STATES.filter((s) => Object.keys(TRANSITIONS[s]).length === 0);

/** The state `event` leads to from `from`, or null when the table has no such transition. */
export function transition(from: RunState, event: RunEvent): RunState | null {
  return TRANSITIONS[from][event] ?? null;
}

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
 * 5xx, 408 Request Timeout and 429 Too Many Requests. Any other 4xx will not improve.
 */
export function classifyStatus(status: number | null): FailureKind {
  if (status === null || status >= 500 || status === 408 || status === 429) return "retryable";
  return "permanent";
}
