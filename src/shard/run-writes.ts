import type { AttemptRow, RunRow } from "../protocol/stored-rows";

/**
 * The SQL of one step of a run, as RunMoves (run-moves.ts) decided it: the run's row and its
 * attempts. Apart from the store's reads and other writes, since it is the one statement group
 * every transition takes.
 */

/** The run columns a step may change, by field: `writeRunStep` writes only those whose value changed. */
const MOVABLE_COLUMNS = {
  state: "state",
  jobVersion: "job_version",
  attempt: "attempt",
  fence: "fence",
  dueAt: "due_at",
  leaseUntil: "lease_until",
  startedAt: "started_at",
  finishedAt: "finished_at",
  status: "status",
  error: "error",
  result: "result",
  permit: "permit",
  redispatches: "redispatches",
} as const satisfies Partial<Record<keyof RunRow, string>>;

export type RunChanges = Partial<Pick<RunRow, Exclude<keyof typeof MOVABLE_COLUMNS, "state">>>;

/** What the hook of a run's step (counters.ts) reads of the run before and after it. */
export type MovedRun = Pick<RunRow, "trigger" | "parentRunId" | "scheduledAt" | "startedAt">;

/** What a step does to the run's latest attempt (kept on the run's row), in the run's own update. */
export type AttemptChange =
  | { start: { attempt: number; fence: number; startedAt: number; completionToken: string } }
  | {
      finish: {
        outcome: AttemptRow["outcome"];
        finishedAt: number;
        status: number | null;
        error: string | null;
        /** When the consumer started the request, where it said: the attempt began at its dispatch, before the queue's wait. */
        startedAt?: number;
      };
    }
  /** The attempt its dispatch began never reached its target (a breaker held it): it is undone, not ended. */
  | { undo: true };

/**
 * Writes a run's step: `next` is the run after it, `attempt` what it does to the latest attempt.
 * One UPDATE, naming only the columns whose value changes: every indexed column named costs a
 * row written, even unchanged (docs/cost.md).
 */
export function writeRunStep(sql: Pick<SqlStorage, "exec">, run: RunRow, next: RunRow, attempt?: AttemptChange): void {
  const set = new Map<string, SqlStorageValue>();
  for (const [field, column] of Object.entries(MOVABLE_COLUMNS) as Array<[keyof typeof MOVABLE_COLUMNS, string]>) {
    if (next[field] !== run[field]) set.set(column, next[field]);
  }
  if (attempt && "start" in attempt) {
    // The attempt on the row so far becomes a row of its own: the row keeps the latest. A run
    // that never started one (no started_at: only a claim sets it) has none to move.
    if (run.startedAt !== null)
      sql.exec(
        `INSERT INTO attempts (run_id, attempt, fence, started_at, finished_at, outcome, status, error, completion_token, late)
         SELECT id, a_number, a_fence, a_started_at, a_finished_at, a_outcome, a_status, a_error, a_token, a_late
         FROM runs WHERE id = ? AND a_fence IS NOT NULL`,
        run.id,
      );
    const a = attempt.start;
    for (const [column, value] of Object.entries({
      a_number: a.attempt,
      a_fence: a.fence,
      a_started_at: a.startedAt,
      a_finished_at: null,
      a_outcome: "running",
      a_status: null,
      a_error: null,
      a_token: a.completionToken,
      a_late: null,
    })) {
      set.set(column, value);
    }
  } else if (attempt && "undo" in attempt) {
    for (const column of ["a_number", "a_fence", "a_started_at", "a_finished_at", "a_outcome", "a_status", "a_error", "a_token", "a_late"])
      set.set(column, null);
  } else if (attempt) {
    const a = attempt.finish;
    set.set("a_outcome", a.outcome).set("a_finished_at", a.finishedAt).set("a_status", a.status).set("a_error", a.error);
    if (a.startedAt !== undefined) set.set("a_started_at", a.startedAt);
  }
  if (set.size > 0) {
    sql.exec(`UPDATE runs SET ${[...set.keys()].map((column) => `${column} = ?`).join(", ")} WHERE id = ?`, ...set.values(), run.id);
  }
}
