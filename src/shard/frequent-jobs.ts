import { type ShardJob, toJob } from "./rows";

/**
 * Frequent jobs: those whose next fire is due within a claim timeout of their last (every
 * second, every 30 s, every minute under the default 60 s claim timeout). Their next due time is
 * `soon_at`, a column no index holds, so a fire updates the job's row and moves no index entry
 * (a fire that moves `next_due_at` moves its `jobs_next_due` entry: a row; docs/cost.md,
 * "Frequent jobs"). The shard keeps them in memory, read once through `jobs_frequent`, which a
 * job enters when it becomes frequent, not at each fire: so a fire reads nothing to find them.
 * Every write here keeps memory in step, and a change that rolls back makes the shard read them
 * again (`forget`).
 */
/**
 * A frequent job's row is written at most this often while it stays frequent (its memory moves
 * at every fire): a shard that restarts reads a next fire up to this far behind, and fires it
 * again, which makes nothing while its runs exist (run ids are derived: docs/architecture.md,
 * invariant 2; a run stays at least a day). A job counting its fires (`maxRuns`) writes every fire.
 */
const FREQUENT_WRITE_EVERY_MS = 60_000;

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
  /** When each job's row was last written by a fire, as far as this object knows. */
  readonly #written = new Map<string, number>();

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
    this.#written.clear();
  }

  /** A job as it stands: a frequent one's next fire from memory, which its row may be behind (FREQUENT_WRITE_EVERY_MS). */
  current(row: ShardJob): ShardJob {
    if (!row.frequent) return row;
    const known = this.jobs.get(row.id);
    return known && known.version === row.version ? { ...row, nextFireAt: known.nextFireAt, dueAt: known.dueAt, fires: known.fires } : row;
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
  fired(job: ShardJob, nextFireAt: number, dueAt: number, firesMade: number, now: number): void {
    const writtenAt = this.#written.get(job.id);
    if (!job.frequent || job.spec.schedule.maxRuns !== undefined || writtenAt === undefined || now - writtenAt >= FREQUENT_WRITE_EVERY_MS) {
      // Becoming frequent, once: the job leaves jobs_next_due (free) and enters jobs_frequent (a row).
      const becomes = job.frequent ? "" : "frequent = 1, next_due_at = NULL, ";
      this.sql.exec(
        `UPDATE jobs SET ${becomes}next_fire_at = ?, soon_at = ?, fires = ? WHERE id = ?`,
        nextFireAt,
        dueAt,
        job.fires + firesMade, // the job's as it stands: its row's may be behind a run's (fired-through.ts)
        job.id,
      );
      this.#written.set(job.id, now);
    }
    this.jobs.set(job.id, { ...job, frequent: true, nextFireAt, dueAt, fires: job.fires + firesMade });
    this.#earliest = undefined;
  }

  /** The job stops being frequent: the caller then sets its next due time in `next_due_at`. */
  leave(job: Pick<ShardJob, "id" | "frequent">): void {
    if (!job.frequent) return;
    this.sql.exec("UPDATE jobs SET frequent = 0, soon_at = NULL WHERE id = ?", job.id);
    this.#jobs?.delete(job.id);
    this.#written.delete(job.id);
    this.#earliest = undefined;
  }
}
