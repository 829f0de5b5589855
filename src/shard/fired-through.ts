import { scheduledRunId } from "../model/ids";
import { nextFireAfter } from "../schedule/next-fire";
import { type ShardJob, toJob } from "./rows";

/** A place in `jobs_next_due`: a due time, and a job id among the jobs due then. */
export interface DuePosition {
  dueAt: number;
  jobId: string;
}

/** How far the alarm has fired, and how far behind that it has looked at claim deadlines. */
interface Positions {
  fired: DuePosition | null;
  checked: DuePosition | null;
}

const KEY = "fired_through";
/** A position before every entry. */
const BEFORE_ALL: DuePosition = { dueAt: Number.MIN_SAFE_INTEGER, jobId: "" };

/**
 * Jobs passed (fired or checked) without a write before the positions are written again. It
 * bounds what a shard that lost its memory reads again (each such job once, to no effect); the
 * retention pass writes them too, before it removes any run.
 */
const WRITE_EVERY_JOBS = 1_000;

/**
 * How far the alarm has fired: the place in `jobs_next_due` (due time, then job id) of the last
 * job it took. The alarm reads due jobs after it, so a job whose fire leaves it nothing more to
 * fire (a one-off job; the last fire of a schedule with an end and no `maxRuns`) keeps its row
 * and its entry as they were, and the position says it has fired: the job's update at its fire
 * was a row written per run (docs/cost.md, "Fired through").
 *
 * Such a job's entry also keeps its run's claim deadline: a second position trails the first,
 * and the alarm moves it over the entries a claim timeout old, looking at each job's run as at
 * a due run (a dispatch not claimed goes out again). So the run needs no `runs_due` entry of its
 * own, another row per run. A change of such a job (which takes it out of the index) first
 * gives its run a claim deadline of its own (`RunLedger.leaveFired`).
 *
 * The positions are written lazily, every WRITE_EVERY_JOBS jobs passed without a write and at
 * each retention pass. A shard that restarts reads the jobs after the written positions again:
 * fires again, which makes nothing, since each fire's run already exists (run ids are derived,
 * docs/architecture.md, invariant 2) and a run stays at least a day after it ends (retention's
 * shortest window), where the positions are written at least every retention pass (10
 * minutes); and looks at claim deadlines again, which finds them handled.
 *
 * So that a job the alarm has not fired is never behind the position, a paused or deleted job
 * has no due time (it enters the index when it resumes), and a due time given to a job is after
 * the position (`dueTimeOf`).
 */
export class FiredThrough {
  /** undefined: not read from storage yet. */
  #positions: Positions | undefined;
  #unwritten = 0;
  /** When the next claim deadline behind the position comes; undefined: to be read. */
  #nextCheck: number | null | undefined;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  private positions(): Positions {
    if (this.#positions === undefined) {
      const value = this.sql.exec("SELECT value FROM meta WHERE key = ?", KEY).toArray()[0]?.value as string | undefined;
      this.#positions = value === undefined ? { fired: null, checked: null } : (JSON.parse(value) as Positions);
    }
    return this.#positions;
  }

  /** Rows of jobs due by `now` after the position, in its order. Paused and deleted jobs have no due time (the filter is there should one have one). */
  dueJobs(now: number, limit: number): Array<Record<string, SqlStorageValue>> {
    const from = this.positions().fired ?? BEFORE_ALL;
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
    const from = this.positions().fired ?? BEFORE_ALL;
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
    return behind({ dueAt, jobId }, this.positions().fired);
  }

  /** A job the alarm fired and left as it was has nothing more to fire; its last fire is `firedAt`. */
  live(job: ShardJob): ShardJob {
    if (job.frequent || job.dueAt === null || !this.covers(job.dueAt, job.id)) return job;
    return asFired(job);
  }

  /**
   * A job as a change (a PATCH, a pause, a resume, a delete) finds it. A job whose fire would be
   * kept (a one-off job; the last fire of a schedule with an end) and made its run has fired even
   * where the position does not say so yet (read again after a restart, before the alarm read the
   * job again): a change must not give it its fire back, which would fire it again once its run
   * has left with retention.
   */
  asChanged(job: ShardJob, now: number, runExists: (runId: string) => boolean): ShardJob {
    const { schedule } = job.spec;
    if (job.firedAt !== null || job.nextFireAt === null || job.nextFireAt > now || job.frequent || schedule.maxRuns !== undefined)
      return job;
    // Cheapest first: the run's read, then the schedule's next fire (a cron expression's walk).
    if (!runExists(scheduledRunId(job.id, job.nextFireAt)) || nextFireAfter(schedule, job.createdAt, job.nextFireAt) !== null) return job;
    return asFired(job);
  }

  /** The due time to give a job that is not frequent: none while paused or deleted, and never one behind the position. */
  dueTimeOf(job: Pick<ShardJob, "id" | "paused" | "deleted">, dueAt: number | null): number | null {
    if (dueAt === null || job.paused || job.deleted) return null;
    return this.covers(dueAt, job.id) ? (this.positions().fired as DuePosition).dueAt + 1 : dueAt;
  }

  /** The alarm took the jobs up to `to`, `unwritten` of them keeping their rows as they were. */
  passed(to: DuePosition, unwritten: number): void {
    this.positions().fired = to;
    if (this.#nextCheck === null) this.#nextCheck = undefined; // there may be something to check now
    this.noteUnwritten(unwritten);
  }

  /**
   * Jobs behind the position whose entry is due by `until` (a claim timeout ago) and not yet
   * checked, in order: their fired instant is `nextFireAt`, as their row kept it.
   */
  awaitingCheck(until: number, limit: number): ShardJob[] {
    const { fired, checked } = this.positions();
    if (fired === null) return [];
    const from = checked ?? BEFORE_ALL;
    return this.sql
      .exec(
        `SELECT * FROM jobs WHERE next_due_at <= ? AND (next_due_at, id) > (?, ?) AND (next_due_at, id) <= (?, ?)
         ORDER BY next_due_at, id LIMIT ?`,
        until,
        from.dueAt,
        from.jobId,
        fired.dueAt,
        fired.jobId,
        limit,
      )
      .toArray()
      .map(toJob);
  }

  /** The job's run's claim deadline was looked at. */
  checked(job: ShardJob): void {
    this.positions().checked = { dueAt: job.dueAt as number, jobId: job.id };
    this.#nextCheck = undefined;
    this.noteUnwritten(1);
  }

  /** The next job to check has a run whose claim deadline comes at `at`. */
  checkAt(at: number): void {
    this.#nextCheck = at;
  }

  /** When the next claim deadline behind the position comes (at the earliest; `checkAt` may say later). */
  nextCheck(claimTimeoutMs: number): number | null {
    if (this.#nextCheck === undefined) {
      const [first] = this.awaitingCheck(Number.MAX_SAFE_INTEGER, 1);
      this.#nextCheck = first ? (first.dueAt as number) + claimTimeoutMs : null;
    }
    return this.#nextCheck;
  }

  private noteUnwritten(jobs: number): void {
    this.#unwritten += jobs;
    if (this.#unwritten >= WRITE_EVERY_JOBS) this.write();
  }

  /** Writes the positions if a job was passed without a write since they were last written. */
  write(): void {
    if (this.#unwritten === 0) return;
    this.sql.exec(
      "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
      KEY,
      JSON.stringify(this.positions()),
    );
    this.#unwritten = 0;
  }

  /** A change rolled back: the positions are read from storage again (the jobs after them are fired and checked again, to no effect). */
  forget(): void {
    this.#positions = undefined;
    this.#unwritten = 0;
    this.#nextCheck = undefined;
  }
}

/** The job as it reads once its row's fire (`nextFireAt`) was made: nothing more to fire. */
function asFired(job: ShardJob): ShardJob {
  return { ...job, nextFireAt: null, dueAt: null, firedAt: job.nextFireAt };
}

/** `p` is at or before `position`. */
function behind(p: DuePosition, position: DuePosition | null): boolean {
  return position !== null && (p.dueAt < position.dueAt || (p.dueAt === position.dueAt && p.jobId <= position.jobId));
}
