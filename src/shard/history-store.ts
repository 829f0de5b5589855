import { runKeyRange } from "../model/ids";
import { FINAL_STATES, sqlList } from "../model/run-states";
import type { AttemptRow, RunRow } from "../protocol/stored-rows";
import { chunksForStatement, placeholders, rowsForList } from "../sql";
import type { DuePosition } from "./fired-through";
import { type ShardJob, toAttempt, toJob, toRun } from "./rows";

const FINAL = sqlList(FINAL_STATES);

/**
 * A run whose entry in `runs_next` the alarm still needs (fired-through.ts), bound to the fired
 * position (?, ?): an entry after it is its job's next fire, unless stale (the job changed
 * since). A monthly job's latest run under a one-day window holds its next fire.
 */
const ENTRY_NEEDED = `(next_due_at IS NOT NULL AND (next_due_at, job_id) > (?, ?)
  AND next_version = (SELECT version FROM jobs WHERE jobs.id = runs.job_id))`;

/**
 * A workflow's step run whose workflow run has not ended: the run still reads its steps' rows
 * (their states decide what starts next, their results are the input of the steps below), so
 * a step leaves only with or after its run, however old or far beyond the cap it is.
 */
const RUN_UNFINISHED = `(parent_run_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM runs AS parent WHERE parent.id = runs.parent_run_id AND parent.state NOT IN (${FINAL})))`;

/**
 * The statements of retention (`retention.ts`): finding a shard's expired history, reading it
 * for the archive and removing it, and the pass's own bookkeeping in `meta`. Apart from
 * `store.ts`, whose statements serve the runs in hand, because these serve the runs that are done.
 */
export class HistoryStore {
  /**
   * Over the same storage as the shard's store (its meter's, so these rows are counted too).
   * `passed`: how far the alarm has fired its entries (fired-through.ts).
   */
  constructor(
    private readonly sql: Pick<SqlStorage, "exec">,
    private readonly passed: () => DuePosition,
  ) {}

  getMeta(key: string): string | null {
    return (this.sql.exec("SELECT value FROM meta WHERE key = ?", key).toArray()[0]?.value as string | undefined) ?? null;
  }

  setMeta(key: string, value: string): void {
    this.sql.exec("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", key, value);
  }

  deleteMeta(key: string): void {
    this.sql.exec("DELETE FROM meta WHERE key = ?", key);
  }

  /** Jobs in id order after `afterId`: a retention pass walks them a page at a time. */
  jobsAfter(afterId: string, limit: number): ShardJob[] {
    return this.sql.exec("SELECT * FROM jobs WHERE id > ? ORDER BY id LIMIT ?", afterId, limit).toArray().map(toJob);
  }

  /**
   * The scheduled instant of the job's `keep`-th newest run, or null when it has fewer: runs
   * before it are beyond the job's cap. Reads the job's runs (one range of the runs' key, which
   * retention keeps near the cap), never another job's. A workflow's step runs do not count:
   * they share their run's instant, so they leave with it.
   */
  keptFrom(jobId: string, keep: number): number | null {
    const row = this.sql
      .exec(
        `SELECT scheduled_at FROM runs WHERE id > ? AND id < ? AND job_id = ? AND parent_run_id IS NULL
         ORDER BY scheduled_at DESC, id DESC LIMIT 1 OFFSET ?`,
        ...runKeyRange(jobId),
        jobId,
        keep - 1,
      )
      .toArray()[0];
    return (row?.scheduled_at as number | undefined) ?? null;
  }

  /**
   * Up to `limit` of the job's finished runs scheduled before `before`, oldest first, save those
   * `ENTRY_NEEDED` keeps and the steps of a workflow run under way. A workflow run comes before
   * its steps (they share its instant), so a pass the limit cuts short never leaves a finished
   * run without the steps a retry of it would keep.
   */
  finishedRunsBefore(jobId: string, before: number, limit: number): RunRow[] {
    const fired = this.passed();
    return this.sql
      .exec(
        `SELECT * FROM runs WHERE id > ? AND id < ? AND job_id = ? AND scheduled_at < ? AND state IN (${FINAL})
           AND NOT ${ENTRY_NEEDED} AND NOT ${RUN_UNFINISHED}
         ORDER BY scheduled_at, parent_run_id IS NOT NULL LIMIT ?`,
        ...runKeyRange(jobId),
        jobId,
        before,
        fired.dueAt,
        fired.jobId,
        limit,
      )
      .toArray()
      .map(toRun);
  }

  /** Every attempt of these runs, in order, each with its run's id. */
  attemptsOf(runIds: string[]): Array<AttemptRow & { runId: string }> {
    return rowsForList(this.sql, runIds, (list) => `SELECT * FROM attempt_log WHERE run_id IN (${list}) ORDER BY run_id, fence`).map(
      (r) => ({
        ...toAttempt(r),
        runId: r.run_id as string,
      }),
    );
  }

  /**
   * Removes finished runs and their earlier attempts (the latest goes with its row); a run
   * revived meanwhile is no longer final and stays, as do the steps of a workflow run revived
   * meanwhile, and a run whose entry is needed again (positions read afresh after a change
   * rolled back). Returns the ids removed.
   */
  removeFinishedRuns(runIds: string[]): string[] {
    const fired = this.passed();
    const removed: string[] = [];
    for (const chunk of chunksForStatement(runIds, 2)) {
      const gone = this.sql
        .exec(
          `DELETE FROM runs WHERE id IN (${placeholders(chunk.length)}) AND state IN (${FINAL}) AND NOT ${ENTRY_NEEDED} AND NOT ${RUN_UNFINISHED}
           RETURNING id`,
          ...chunk,
          fired.dueAt,
          fired.jobId,
        )
        .toArray();
      removed.push(...gone.map((r) => r.id as string));
    }
    for (const chunk of chunksForStatement(removed)) {
      this.sql.exec(`DELETE FROM attempts WHERE run_id IN (${placeholders(chunk.length)})`, ...chunk);
    }
    return removed;
  }

  /**
   * A job whose runs are all gone leaves the shard: one deleted, or a standalone one that has
   * fired (the caller knows it fired: fired-through.ts), which no catalog remembers either.
   */
  purgeJob(jobId: string): boolean {
    return (
      this.sql.exec(
        "DELETE FROM jobs WHERE id = ?1 AND (deleted = 1 OR standalone = 1) AND NOT EXISTS (SELECT 1 FROM runs WHERE id > ?2 AND id < ?3)",
        jobId,
        ...runKeyRange(jobId),
      ).rowsWritten > 0
    );
  }
}
