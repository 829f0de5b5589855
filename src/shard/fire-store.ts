import { PENDING_STATES, sqlList, transition, UNFINISHED_STATES } from "../model/run-states";
import type { RunRow } from "../protocol/stored-rows";
import { chunksForStatement, placeholders } from "../sql";
import type { FiredThrough } from "./fired-through";
import type { FrequentJobs } from "./frequent-jobs";
import type { Leases } from "./leases";
import { type RunToWrite, type ShardJob, toRun } from "./rows";

/**
 * Groups of states as SQL lists, from the state table (docs/architecture.md, run lifecycle).
 * Every per-job query over open runs says `finished_at IS NULL` as well, so that SQLite reads
 * the `runs_open` index, not the job's history.
 */
const UNFINISHED = sqlList(UNFINISHED_STATES);
const PENDING = sqlList(PENDING_STATES);

/**
 * The SQL of a fire (firing.ts), and of a job's change that looks at its runs: which jobs are
 * due (by the alarm's position, fired-through.ts, and from memory for those due again within a
 * claim timeout, frequent-jobs.ts), the run a fire makes (every new run is inserted here: a
 * trigger's, a backfill's, a chain's, a workflow's step), the job's next fire, and the open runs
 * an overlap policy, a buffered start or a pause looks at. What a started run then writes is
 * run-writes.ts's.
 */
export class FireStore {
  constructor(
    private readonly sql: Pick<SqlStorage, "exec">,
    private readonly firedThrough: FiredThrough,
    private readonly frequent: FrequentJobs,
    private readonly leases: Leases,
  ) {}

  /** Jobs whose next fire is due, earliest first: frequent ones from memory, others by their entries after the alarm's position. */
  dueJobs(now: number, limit: number): ShardJob[] {
    const others = this.firedThrough.dueJobs(now, limit);
    const frequent = this.frequent.due(now, limit);
    if (frequent.length === 0) return others;
    return [...others, ...frequent].sort((a, b) => (a.dueAt as number) - (b.dueAt as number)).slice(0, limit);
  }

  /** The earliest due instant of a live job's next fire. */
  earliestFire(): number | null {
    const other = this.firedThrough.earliest();
    const frequent = this.frequent.earliest();
    return other === null || frequent === null ? (other ?? frequent) : Math.min(other, frequent);
  }

  /**
   * Inserts a run: `running` (dispatched as it is made: its first attempt begins, leased until
   * `leaseUntil`; the caller sends its dispatch after commit), `queued` (a workflow run, which
   * begins its steps next), `waiting` (for admission), `buffered` (for the job's unfinished run)
   * or `skipped` (final). False, and nothing written, if the run exists: run ids are derived, so
   * a repeated fire is harmless.
   */
  createRun(
    run: RunToWrite,
    now: number,
    as:
      | { state: "running"; leaseUntil: number; completionToken: string }
      | { state: "queued" }
      | { state: "waiting"; parkedFor?: string }
      | { state: "buffered" }
      | { state: "skipped"; reason: string },
  ): boolean {
    // Born running is born queued and dispatched in one step: the state table must allow both.
    if (as.state === "running" && transition("queued", "dispatch") !== "running")
      throw new Error("a run cannot be dispatched as it is made");
    const fence = run.fence ?? 1;
    const started = as.state === "running";
    const inserted = this.sql.exec(
      `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, catch_up, state, attempt, fence, due_at, created_at, finished_at, error, watched,
         parent_run_id, next_fire_at, next_due_at, next_version, next_fires,
         lease_until, started_at, a_number, a_fence, a_started_at, a_outcome, a_token, permit, parked_tenant, waiting_since)
       VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
      run.id,
      run.jobId,
      run.jobVersion,
      run.trigger,
      run.scheduledAt,
      run.catchUp ? 1 : 0,
      as.state,
      fence,
      as.state === "waiting" && !as.parkedFor ? now : null,
      now,
      as.state === "skipped" ? now : null,
      as.state === "skipped" ? as.reason : null,
      run.watched || (as.state === "waiting" && as.parkedFor) ? 1 : 0,
      run.parentRunId ?? null,
      run.next?.fireAt ?? null,
      run.next?.dueAt ?? null,
      run.next?.version ?? null,
      run.next?.fires ?? null,
      started ? as.leaseUntil : null,
      started ? now : null,
      started ? 1 : null,
      started ? fence : null,
      started ? now : null,
      started ? "running" : null,
      started ? as.completionToken : null,
      started ? (run.permit ?? null) : null,
      as.state === "waiting" ? (as.parkedFor ?? null) : null,
      as.state === "waiting" && as.parkedFor ? now : null,
    ).rowsWritten;
    return inserted > 0;
  }

  /** Moves a job that is not frequent to its next fire; `fires`: its fire count with the fires just made (its row's may be behind a run's). */
  setNextFire(jobId: string, nextFireAt: number | null, nextDueAt: number | null, fires: number): void {
    this.sql.exec(
      "UPDATE jobs SET next_fire_at = ?, next_due_at = ?, fires = ? WHERE id = ?",
      nextFireAt,
      this.firedThrough.dueTimeOf({ id: jobId, paused: false, deleted: false }, nextDueAt),
      fires,
      jobId,
    );
  }

  /**
   * A job's runs that have not ended, oldest fire first: the ones an overlap policy looks at.
   * Sorted here, not by SQL: the few rows in runs_open are all read anyway. Only for a job
   * whose policies watch its open runs (`watchesOpenRuns`): others' are not in runs_open.
   */
  unfinishedRuns(jobId: string): RunRow[] {
    return this.sql
      .exec(`SELECT * FROM runs WHERE job_id = ? AND finished_at IS NULL AND watched = 1 AND state IN (${UNFINISHED})`, jobId)
      .toArray()
      .map(toRun)
      .sort((a, b) => a.scheduledAt - b.scheduledAt);
  }

  bufferedRuns(jobId?: string): RunRow[] {
    const rows =
      jobId === undefined
        ? this.sql.exec("SELECT * FROM runs WHERE state = 'buffered'")
        : this.sql.exec("SELECT * FROM runs WHERE state = 'buffered' AND job_id = ?", jobId);
    return rows.toArray().map(toRun);
  }

  /**
   * Runs of a job that have not started an attempt yet or wait for their next one: its watched
   * ones through runs_open; the others have a due time (a retry, an admission), found among the
   * shard's due runs (runs_due: work in hand, never history). A dispatched run is running: its
   * attempt has begun.
   */
  pendingRuns(jobId: string): RunRow[] {
    const watched = this.sql.exec(
      `SELECT * FROM runs WHERE job_id = ? AND finished_at IS NULL AND watched = 1 AND state IN (${PENDING})`,
      jobId,
    );
    const due = this.sql.exec(
      `SELECT * FROM runs WHERE due_at IS NOT NULL AND job_id = ? AND watched = 0 AND state IN (${PENDING})`,
      jobId,
    );
    return [...watched.toArray().map(toRun), ...due.toArray().map(toRun)];
  }

  /** A PATCH set an overlap policy or a limit: the job's open runs join runs_open (not a workflow's steps: their run does). */
  watchOpenRuns(jobId: string): void {
    this.sql.exec(
      "UPDATE runs SET watched = 1 WHERE due_at IS NOT NULL AND job_id = ? AND watched = 0 AND finished_at IS NULL AND parent_run_id IS NULL",
      jobId,
    );
    for (const chunk of chunksForStatement(this.leases.runsOf(jobId)))
      this.sql.exec(`UPDATE runs SET watched = 1 WHERE id IN (${placeholders(chunk.length)}) AND finished_at IS NULL`, ...chunk);
  }
}
