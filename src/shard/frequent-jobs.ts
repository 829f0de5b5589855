import { scheduledRunId } from "../model/ids";
import type { RunRow } from "./contract";
import { type ShardJob, toJob, toRun } from "./rows";

/** A scheduled run whose claim deadline its job's fires look at: dispatched or running, with no due time of its own. */
const DEADLINE_ON_JOB = "trigger = 'schedule' AND due_at IS NULL AND state IN ('queued', 'running')";

/**
 * Frequent jobs: those whose next fire is due within a claim timeout of their last (every
 * second, every 30 s, every minute under the default 60 s claim timeout). Their runs cost two
 * rows fewer (docs/cost.md, "Frequent jobs"):
 *
 * - Their next due time is `soon_at`, a column no index holds, so a fire updates the job's row
 *   and moves no index entry (a fire that moves `next_due_at` moves its `jobs_next_due` entry:
 *   a row). The shard keeps them in memory, read once through `jobs_frequent`, which a job
 *   enters when it becomes frequent, not at each fire; every write here keeps memory in step,
 *   and a change that rolls back makes the shard read them again (`forget`).
 * - Their scheduled runs are dispatched with no due time, so with no `runs_due` entry: a later
 *   fire of the job, which comes within a claim timeout, looks at each run's claim deadline
 *   (`deadlinesFrom`, `awaitingDeadline`) as the alarm looks at `runs_due`. A job that stops
 *   being frequent (a slower next fire, none, a change, a pause, a delete) first gives those
 *   runs their claim deadline in `runs_due` (`leave`), so no run is left unwatched. A lost
 *   dispatch is then sent again up to a claim timeout plus one period of the job late, where
 *   `runs_due` would have sent it after a claim timeout.
 */
export class FrequentJobs {
  /**
   * Each live frequent job as its row reads, read from storage once, then kept by `fired`: the
   * only write, while a job is frequent, to the columns a fire reads (a change, a pause or a
   * delete goes through `leave` first; a failure streak or a rate's next slot is read from
   * storage where it is used). So a fire reads nothing to find its jobs, nor parses their specs.
   */
  #jobs: Map<string, ShardJob> | undefined;
  /** The earliest of their due times, asked after every call: kept until a fire or a leave changes them. */
  #earliest: number | null | undefined;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  private get jobs(): Map<string, ShardJob> {
    this.#jobs ??= new Map(
      this.sql
        .exec("SELECT * FROM jobs WHERE frequent = 1 AND paused = 0 AND deleted = 0")
        .toArray()
        .map((r) => [r.id as string, toJob(r)]),
    );
    return this.#jobs;
  }

  /** A change rolled back, or storage was written behind the shard's back: what memory holds is read again when next needed. */
  forget(): void {
    this.#jobs = undefined;
    this.#earliest = undefined;
  }

  /** Up to `limit` frequent jobs due by `now`, earliest first. */
  due(now: number, limit: number): ShardJob[] {
    const due: ShardJob[] = [];
    for (const job of this.jobs.values()) if ((job.dueAt as number) <= now) due.push(job);
    return due
      .sort((a, b) => (a.dueAt as number) - (b.dueAt as number))
      .slice(0, limit)
      .map((job) => ({ ...job }));
  }

  earliest(): number | null {
    if (this.#earliest !== undefined) return this.#earliest;
    let earliest: number | null = null;
    for (const { dueAt } of this.jobs.values()) if (earliest === null || (dueAt as number) < earliest) earliest = dueAt;
    this.#earliest = earliest;
    return earliest;
  }

  /** The job fired, and its next fire is due within a claim timeout: it is, or becomes, frequent. */
  fired(job: ShardJob, nextFireAt: number, dueAt: number, firesMade: number, deadlinesFrom: number | null): void {
    // Becoming frequent, once: the job leaves jobs_next_due (free) and enters jobs_frequent (a row).
    const becomes = job.frequent ? "" : "frequent = 1, next_due_at = NULL, ";
    this.sql.exec(
      `UPDATE jobs SET ${becomes}next_fire_at = ?, soon_at = ?, fires = ?, deadlines_from = ? WHERE id = ?`,
      nextFireAt,
      dueAt,
      job.fires + firesMade, // the job's as it stands: its row's may be behind a run's (fired-through.ts)
      deadlinesFrom,
      job.id,
    );
    this.jobs.set(job.id, { ...job, frequent: true, nextFireAt, dueAt, fires: job.fires + firesMade, deadlinesFrom });
    this.#earliest = undefined;
  }

  /**
   * The job stops being frequent: its runs still waiting for it to look at their claim deadline
   * get that deadline in `runs_due` (their creation plus the claim timeout, as they would have
   * had from the start). The caller then sets the job's next due time in `next_due_at`.
   */
  leave(job: Pick<ShardJob, "id" | "frequent" | "deadlinesFrom">, claimTimeoutMs: number, now: number): void {
    if (!job.frequent) return;
    this.sql.exec("UPDATE jobs SET frequent = 0, soon_at = NULL, deadlines_from = NULL WHERE id = ?", job.id);
    if (job.deadlinesFrom !== null && job.deadlinesFrom <= now) {
      // A scheduled run is fired at its instant or later, so none of these is scheduled after now.
      this.sql.exec(
        `UPDATE runs SET due_at = created_at + ? WHERE id >= ? AND id <= ? AND ${DEADLINE_ON_JOB}`,
        claimTimeoutMs,
        scheduledRunId(job.id, job.deadlinesFrom),
        scheduledRunId(job.id, now),
      );
    }
    this.#jobs?.delete(job.id);
    this.#earliest = undefined;
  }

  /**
   * The job's runs, fired from `from` to `until`, whose claim deadline its fires look at: one
   * range of the runs' key (a scheduled run's id is its job's and its instant's in base 36, eight
   * digits from 1973 to 2059, so ids sort as their instants). `from` is at most about two claim
   * timeouts back, or a jitter: the range holds the job's latest runs, never its history.
   */
  awaitingDeadline(jobId: string, from: number, until: number): RunRow[] {
    if (until < from) return [];
    return this.sql
      .exec(
        `SELECT * FROM runs WHERE id >= ? AND id <= ? AND ${DEADLINE_ON_JOB}`,
        scheduledRunId(jobId, from),
        scheduledRunId(jobId, until),
      )
      .toArray()
      .map(toRun);
  }
}
