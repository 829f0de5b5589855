/** A place in `jobs_next_due`: a due time, and a job id among the jobs due then. */
export interface DuePosition {
  dueAt: number;
  jobId: string;
}

const KEY = "fired_through";

/**
 * Jobs passed without their row written before the position is written again. It bounds what a
 * shard that lost its memory reads again (each such job once: its run exists, so nothing fires);
 * the retention pass writes the position too, before it removes any run.
 */
export const WRITE_EVERY_JOBS = 1_000;

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
 * the position (`dueAfter`).
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

  /** The job, due at `dueAt` (in `jobs_next_due`), has been fired. */
  covers(dueAt: number, jobId: string): boolean {
    const p = this.position();
    return p !== null && (dueAt < p.dueAt || (dueAt === p.dueAt && jobId <= p.jobId));
  }

  /** A due time to give a job: `dueAt`, or just after the position if it would be behind it. */
  dueAfter(dueAt: number, jobId: string): number {
    return this.covers(dueAt, jobId) ? (this.position() as DuePosition).dueAt + 1 : dueAt;
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
