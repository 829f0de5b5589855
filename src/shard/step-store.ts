import { stepKeyRange } from "../model/ids";
import type { AttemptRow, RunRow } from "../protocol/stored-rows";
import { toAttempt, toRun } from "./rows";

/**
 * The statements of workflows (`workflows.ts`): a workflow run's step runs, which are one range
 * of the runs' primary key (`stepKeyRange`, at most 50 rows), and a job's workflow runs in
 * progress, which are in `runs_open` (a workflow run is always watched).
 */
export class StepStore {
  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** The step runs of a workflow run, in key order. */
  stepRuns(runId: string): RunRow[] {
    const [from, to] = stepKeyRange(runId);
    return this.sql.exec("SELECT * FROM runs WHERE id > ? AND id < ?", from, to).toArray().map(toRun);
  }

  /** Every attempt of a workflow run's steps (for reading the run), by step run. */
  stepAttempts(runId: string): Map<string, AttemptRow[]> {
    const [from, to] = stepKeyRange(runId);
    const byRun = new Map<string, AttemptRow[]>();
    for (const row of this.sql.exec("SELECT * FROM attempt_log WHERE run_id > ? AND run_id < ? ORDER BY fence", from, to)) {
      const list = byRun.get(row.run_id as string) ?? [];
      list.push(toAttempt(row));
      byRun.set(row.run_id as string, list);
    }
    return byRun;
  }

  /** A job's workflow runs that have begun their steps and not ended. */
  workflowsInProgress(jobId: string): RunRow[] {
    return this.sql
      .exec(
        "SELECT * FROM runs WHERE job_id = ? AND finished_at IS NULL AND watched = 1 AND state = 'running' AND parent_run_id IS NULL",
        jobId,
      )
      .toArray()
      .map(toRun);
  }

  /**
   * A step run a retry starts again: its latest attempt joins its earlier ones in `attempts`
   * (their fences never meet the new run's, see `workflows.ts`), and the row goes, so the step
   * is blocked again until the graph starts it.
   */
  removeStepRun(id: string): void {
    this.sql.exec(
      `INSERT INTO attempts (run_id, attempt, fence, started_at, finished_at, outcome, status, error, completion_token, late)
       SELECT id, a_number, a_fence, a_started_at, a_finished_at, a_outcome, a_status, a_error, a_token, a_late
       FROM runs WHERE id = ? AND a_fence IS NOT NULL`,
      id,
    );
    this.sql.exec("DELETE FROM runs WHERE id = ?", id);
  }
}
