import type { ShardJob } from "./rows";

/** A place in `jobs_next_due`: a due time, and a job id among the jobs due then. */
export interface DuePosition {
  dueAt: number;
  jobId: string;
}

const KEY = "fired_through";
/** A position before every entry. */
const BEFORE_ALL: DuePosition = { dueAt: Number.MIN_SAFE_INTEGER, jobId: "" };

/**
 * Jobs passed without their row written before the position is written again. It bounds what a
 * shard that lost its memory reads again (each such job once: its run exists, so nothing fires);
 * the retention pass writes the position too, before it removes any run.
 */
const WRITE_EVERY_JOBS = 1_000;

/**
 * How far the alarm has fired: the place in `jobs_next_due` (due time, then job id) of the last
 * job it took. The alarm reads due jobs after it, so a job whose fire leaves it nothing more to
 * fire (a one-off job; the last fire of a schedule with an end and no `maxRuns`) keeps its row
 * and its entry as they were, and the position says it has fired: the job's update at its fire
 * was a row written per run (docs/cost.md, "Fired through").
 *
 * The position is written lazily, every WRITE_EVERY_JOBS jobs passed without a write and at each
 * retention pass. A shard that restarts reads the jobs after the written position again and
 * fires them again, which makes nothing: each fire's run already exists (run ids are derived,
 * docs/architecture.md, invariant 2), and a run stays at least a day after it ends (retention's
 * shortest window), where the position is written at least every retention pass (10 minutes).
 *
 * So that a job the alarm has not fired is never behind the position, a paused or deleted job
 * has no due time (it enters the index when it resumes), and a due time given to a job is after
 * the position (`dueTimeOf`).
 */
export class FiredThrough {
  /** undefined: not read from storage yet. */
  #position: DuePosition | null | undefined;
  #unwritten = 0;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  position(): DuePosition | null {
    if (this.#position === undefined) {
      const value = this.sql.exec("SELECT value FROM meta WHERE key = ?", KEY).toArray()[0]?.value as string | undefined;
      this.#position = value === undefined ? null : (JSON.parse(value) as DuePosition);
    }
    return this.#position;
  }

  /** Rows of jobs due by `now` after the position, in its order. Paused and deleted jobs have no due time (the filter is there should one have one). */
  dueJobs(now: number, limit: number): Array<Record<string, SqlStorageValue>> {
    const from = this.position() ?? BEFORE_ALL;
    return this.sql
      .exec(
        `SELECT * FROM jobs WHERE next_due_at <= ? AND (next_due_at, id) > (?, ?) AND paused = 0 AND deleted = 0
         ORDER BY next_due_at, id LIMIT ?`,
        now,
        from.dueAt,
        from.jobId,
        limit,
      )
      .toArray();
  }

  /** The first due time after the position. */
  earliest(): number | null {
    const from = this.position() ?? BEFORE_ALL;
    const first = this.sql
      .exec(
        "SELECT next_due_at FROM jobs WHERE next_due_at IS NOT NULL AND (next_due_at, id) > (?, ?) ORDER BY next_due_at, id LIMIT 1",
        from.dueAt,
        from.jobId,
      )
      .toArray()[0];
    return (first?.next_due_at as number | undefined) ?? null;
  }

  /** The job, due at `dueAt` (in `jobs_next_due`), has been fired. */
  covers(dueAt: number, jobId: string): boolean {
    const p = this.position();
    return p !== null && (dueAt < p.dueAt || (dueAt === p.dueAt && jobId <= p.jobId));
  }

  /** A job the alarm fired and left as it was has nothing more to fire. */
  live(job: ShardJob): ShardJob {
    if (job.frequent || job.dueAt === null || !this.covers(job.dueAt, job.id)) return job;
    return { ...job, nextFireAt: null, dueAt: null };
  }

  /** The due time to give a job that is not frequent: none while paused or deleted, and never one behind the position. */
  dueTimeOf(job: Pick<ShardJob, "id" | "paused" | "deleted">, dueAt: number | null): number | null {
    if (dueAt === null || job.paused || job.deleted) return null;
    return this.covers(dueAt, job.id) ? (this.position() as DuePosition).dueAt + 1 : dueAt;
  }

  /** The alarm took the jobs up to `to`, `unwritten` of them keeping their rows as they were. */
  passed(to: DuePosition, unwritten: number): void {
    this.#position = to;
    this.#unwritten += unwritten;
    if (this.#unwritten >= WRITE_EVERY_JOBS) this.write();
  }

  /** Writes the position if a job was passed without a write since it was last written. */
  write(): void {
    if (this.#unwritten === 0 || !this.#position) return;
    this.sql.exec(
      "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
      KEY,
      JSON.stringify(this.#position),
    );
    this.#unwritten = 0;
  }

  /** A change rolled back: the position is read from storage again (the jobs after it are fired again, to no effect). */
  forget(): void {
    this.#position = undefined;
    this.#unwritten = 0;
  }
}
