/**
 * The run lifecycle: every state a run can be in and every transition between them, in one
 * table used by the shard and by the tests. A transition not in the table is refused.
 *
 *   queued ──dispatch──▶ running ──succeed──▶ succeeded
 *     ▲                     │ ├──reject──▶ failed   (the target refused for good: 4xx)
 *     │                     │ ├──exhaust─▶ dead     (retryable failures used every attempt)
 *     │                     │ └──retry───▶ retry_wait ──requeue──▶ queued
 *     │                     ├redispatch   (both stay running: the lease ran out with no
 *     │                     └abandon       outcome, or the Queue dead-lettered the dispatch;
 *     │                                    it goes out again under the same fence)
 *     └──revive── dead / failed   (POST /v1/runs/:id/retry: a fresh set of attempts)
 *   `queued` is a run due to start: the same transaction dispatches it (its attempt begins
 *   and its lease starts as its dispatch is made: there is no claim), so a run is seen
 *   queued only between steps of one change; the ledger applies `admit`, `requeue`, `start`,
 *   `revive` and a new run's creation together with `dispatch` as one write.
 *   queued / running / retry_wait ──cancel──▶ cancelled   (job paused or deleted, run replaced,
 *                                 a workflow step's dispatch lost after a PATCH removed the step)
 *   buffered ──start──▶ queued   (overlap buffer_one: the previous run ended)
 *   skipped                       (overlap forbid: born final)
 *   waiting ──admit──▶ queued    (flow control: the job's maxConcurrency or ratePerSecond, or
 *                                 the tenant's maxRunsInFlight, left room for it)
 *   retry_wait / buffered / dead / failed ──hold──▶ waiting   (instead of requeue, start or
 *                                 revive, for a job under flow control)
 *   running ──hold──▶ waiting     (a circuit breaker is open for the target's origin: the run
 *                                 waits, its attempt unspent, until a probe may go)
 *   dead ──succeed_late──▶ succeeded   (the last attempt timed out, then reported success)
 *   queued ──begin_steps──▶ running   (a workflow run: instead of a dispatch it starts its
 *                                 steps, each a run of its own; it ends succeeded, or failed
 *                                 (reject) when a step failed, once every step has ended)
 * A lease that expires counts as a retryable failure of the running attempt.
 * docs/architecture.md draws this table; `npm run docs:diagrams` redraws it after a change.
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
  | "dispatch"
  | "succeed"
  | "retry"
  | "exhaust"
  | "reject"
  | "requeue"
  | "redispatch"
  | "cancel"
  | "abandon"
  | "revive"
  | "succeed_late"
  | "start"
  | "hold"
  | "admit"
  | "begin_steps";

export const TRANSITIONS: Readonly<Record<RunState, Partial<Record<RunEvent, RunState>>>> = {
  waiting: { admit: "queued", cancel: "cancelled" },
  queued: { dispatch: "running", begin_steps: "running", cancel: "cancelled" },
  running: {
    succeed: "succeeded",
    retry: "retry_wait",
    exhaust: "dead",
    reject: "failed",
    cancel: "cancelled",
    redispatch: "running",
    abandon: "running",
    hold: "waiting",
  },
  retry_wait: { requeue: "queued", hold: "waiting", cancel: "cancelled" },
  buffered: { start: "queued", hold: "waiting", cancel: "cancelled" },
  succeeded: {},
  failed: { revive: "queued", hold: "waiting" },
  dead: { revive: "queued", hold: "waiting", succeed_late: "succeeded" },
  cancelled: {},
  skipped: {},
};

/*
 * Named groups of states. Code and SQL (through `sqlList`) use these names instead of spelling
 * states out, so a state added to the table is placed in each group once, here, and the tests
 * check each group against the table.
 */

/** The states a run is created in: by a fire or a trigger, held by flow control, or placed by the overlap policy. */
export const INITIAL_STATES: readonly RunState[] = ["queued", "waiting", "buffered", "skipped"];
/** States a run ends in unless a person retries it (dead and failed are the dead letters). */
export const FINAL_STATES: readonly RunState[] = ["succeeded", "failed", "dead", "cancelled", "skipped"];
export const DEAD_LETTER_STATES: readonly RunState[] = ["dead", "failed"];
/** Started or due to start and not ended: what an overlap policy counts as the job's previous run. */
export const UNFINISHED_STATES: readonly RunState[] = ["waiting", "queued", "running", "retry_wait"];
/**
 * No attempt under way, but one is to come: what a pause or delete cancels. A running attempt
 * is left to finish and be recorded.
 */
export const PENDING_STATES: readonly RunState[] = ["waiting", "queued", "retry_wait", "buffered"];
/** States that hold a tenant's run-in-flight permit, when it has a limit: dispatched or running. */
export const IN_FLIGHT_STATES: readonly RunState[] = ["queued", "running"];
/** Held back by flow control until admission lets it start. */
export const AWAITING_ADMISSION_STATES: readonly RunState[] = ["waiting"];
/** An attempt is under way under a lease (`lease_until`, leases.ts): dispatched, executing, or accepted (docs/architecture.md, invariant 5). */
export const LEASED_STATES: readonly RunState[] = ["running"];
/** overlap buffer_one: waits for the job's unfinished run to end. */
export const BUFFERED_STATES: readonly RunState[] = ["buffered"];
/** The state `event` leads to from `from`, or null when the table has no such transition. */
export function transition(from: RunState, event: RunEvent): RunState | null {
  return TRANSITIONS[from][event] ?? null;
}

/** What made a run: its schedule, a person (trigger), or a backfill. */
export const RUN_TRIGGERS = ["schedule", "manual", "backfill"] as const;

/**
 * A group as the body of a SQL `IN (...)`: `'dead', 'failed'`. Interpolated, not bound: a
 * partial index's WHERE takes no parameters, and SQLite uses such an index only for a query
 * that spells the same terms. The check on each name keeps the interpolation free of quotes.
 */
export function sqlList(states: readonly RunState[]): string {
  return sqlNameList(states);
}

function sqlNameList(names: readonly string[]): string {
  if (names.length === 0) throw new Error("an empty SQL list matches nothing and is not valid SQL");
  return names
    .map((name) => {
      if (!/^[a-z_]+$/.test(name)) throw new Error(`${JSON.stringify(name)} is not a state name to put in SQL`);
      return `'${name}'`;
    })
    .join(", ");
}

/** SQL CHECK list derived from the table, so storage can never hold a state the code does not know. */
export const RUN_STATE_SQL_LIST = sqlList(RUN_STATES);

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
