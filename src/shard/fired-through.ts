import { runKeyRange, scheduledRunId } from "../model/ids";
import { nextFireAfter } from "../schedule/next-fire";
import { type Row, type ShardJob, toJob } from "./rows";

/** A place in the order of entries (`jobs_next_due` and `runs_next`): a due time, and a job id among the entries due then. */
export interface DuePosition {
  dueAt: number;
  jobId: string;
}

/**
 * How far the alarm has fired. (`checked`, a second position that trailed it by a claim
 * timeout, is what shards before schema step 19 wrote: read, never used, written as it was.)
 */
interface Positions {
  fired: DuePosition | null;
  checked?: DuePosition | null;
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
/** How far two machines' clocks may differ: a shard that moved reads instants its last host wrote. */
const CLOCK_SKEW_MS = 60_000;

/**
 * The most of jobs' specs one read of due jobs takes (as SQLite counts a spec's length), each of
 * its two queries: a job's sealed target holds its body, up to 1 MiB for a QStash message (1.4 MB
 * sealed), so 60 such messages due together were 80 MB read at once, and the object's 128 MB
 * ran out on every alarm. A job larger than this alone is a page of its own.
 */
export const DUE_PAGE_BYTES = 4_000_000;

/**
 * How far the alarm has fired: the place in `jobs_next_due` (due time, then job id) of the last
 * job it took. The alarm reads due jobs after it, so a job whose fire leaves it nothing more to
 * fire (a one-off job; the last fire of a schedule with an end and no `maxRuns`) keeps its row
 * and its entry as they were, and the position says it has fired: the job's update at its fire
 * was a row written per run (docs/cost.md, "Fired through").
 *
 * The position is written lazily, every WRITE_EVERY_JOBS jobs passed without a write and at
 * each retention pass. A shard that restarts reads the jobs after the written positions again:
 * fires again, which makes nothing, since each fire's run already exists (run ids are derived,
 * docs/architecture.md, invariant 2) and a run stays at least a day after it ends (retention's
 * shortest window), where the positions are written at least every retention pass (10
 * minutes).
 *
 * So that a job the alarm has not fired is never behind the position, a paused or deleted job
 * has no due time (it enters the index when it resumes), and a due time given to a job is after
 * the position (`dueTimeOf`).
 *
 * A recurring job's next fire is kept the same way (docs/cost.md, "A recurring job's next
 * fire"): its fire writes that fire on the run it makes (`runs_next`) and leaves the job's row as
 * it was. The alarm reads both indexes after the position as one order; a run's entry counts
 * while the job has not changed since (a change writes the row afresh). An entry behind the
 * position, the row's or a run's, names a fire made; no entry is cleared. The job's next fire
 * is the newest of its entries (`live`). Retention keeps a run while the alarm still needs its
 * entry (`passedThrough`; history-store.ts).
 */
export class FiredThrough {
  /** undefined: not read from storage yet. */
  #positions: Positions | undefined;
  #unwritten = 0;
  /**
   * When the positions were last read from storage. An entry the alarm reads again because the
   * written position lags the one it had (a restart, a rolled-back change) was due before then:
   * only such an entry can have been replaced by a newer one (`superseded`). Not `#`: a test
   * sets it back, to see a later fire skip that read.
   */
  private readAt = Number.POSITIVE_INFINITY;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  private positions(): Positions {
    if (this.#positions === undefined) {
      this.readAt = Date.now();
      const value = this.sql.exec("SELECT value FROM meta WHERE key = ?", KEY).toArray()[0]?.value as string | undefined;
      this.#positions = value === undefined ? { fired: null } : (JSON.parse(value) as Positions);
    }
    return this.#positions;
  }

  /**
   * Jobs due by `now` after the position, in its order: by the job's own entry, or by a run's
   * (the job's next fire and fire count then the run's, and `firedAt` the fire its row names,
   * which has been made). Paused and deleted jobs have no due time of their own (the filter is
   * there should one have one). A run's entry stands for its job's next fire while the job has
   * not changed since and is live and not frequent; one that does not (`stale`) is read all the
   * same, once, so that the position passes it: filtered out here, a shard's stale entries would
   * be read again by every call that asks for the first due one.
   * A page ends at `limit` jobs or at `maxBytes` of their specs, whichever comes first (at least
   * one job): the jobs after it are still due, and the next read takes them. Each query sums its
   * specs' lengths in SQLite, over the `limit` entries it reads anyway, so a spec past the page
   * is never read into memory.
   */
  dueJobs(now: number, limit: number, maxBytes = DUE_PAGE_BYTES): ShardJob[] {
    const from = this.positions().fired ?? BEFORE_ALL;
    const own = this.sql
      .exec(
        `SELECT * FROM (SELECT *, SUM(length(spec)) OVER (ORDER BY next_due_at, id) AS page_bytes FROM (
           SELECT *, id AS entry_job FROM jobs WHERE next_due_at <= ? AND (next_due_at, id) > (?, ?) AND paused = 0 AND deleted = 0
           ORDER BY next_due_at, id LIMIT ?))
         WHERE page_bytes <= ? OR page_bytes = length(spec) ORDER BY next_due_at, id`,
        now,
        from.dueAt,
        from.jobId,
        limit,
        maxBytes,
      )
      .toArray();
    const carried = this.sql
      .exec(
        `SELECT * FROM (SELECT *, SUM(length(spec)) OVER (ORDER BY carried_due, entry_job) AS page_bytes FROM (
           SELECT jobs.*, runs.job_id AS entry_job, runs.next_fire_at AS carried_fire, runs.next_due_at AS carried_due,
             runs.next_fires AS carried_fires, runs.next_version AS carried_version, jobs.next_fire_at AS row_fire
           FROM runs JOIN jobs ON jobs.id = runs.job_id
           WHERE runs.next_due_at <= ? AND (runs.next_due_at, runs.job_id) > (?, ?)
           ORDER BY runs.next_due_at, runs.job_id LIMIT ?))
         WHERE page_bytes <= ? OR page_bytes = length(spec) ORDER BY carried_due, entry_job`,
        now,
        from.dueAt,
        from.jobId,
        limit,
        maxBytes,
      )
      .toArray()
      .map((r): Row => ({ ...r, next_fire_at: r.carried_fire ?? null, next_due_at: r.carried_due ?? null, fires: r.carried_fires ?? 0 }));
    return inOrder(own, carried, limit, maxBytes).map(({ page_bytes: _, ...r }) => {
      const job: ShardJob = { ...toJob(r), firedAt: (r.row_fire as number | undefined) ?? null };
      if (r.carried_version === undefined) return job;
      const stale = r.carried_version !== r.version || job.paused || job.deleted || job.frequent;
      // Passed at its own place in the order, whatever its job is now (a frequent job's due time is another).
      return stale ? { ...job, frequent: false, dueAt: r.next_due_at as number, stale } : job;
    });
  }

  /** The first due time after the position. */
  earliest(): number | null {
    const from = this.positions().fired ?? BEFORE_ALL;
    const first = (query: string) => (this.sql.exec(query, from.dueAt, from.jobId).toArray()[0]?.next_due_at as number | undefined) ?? null;
    const own = first(
      "SELECT next_due_at FROM jobs WHERE next_due_at IS NOT NULL AND (next_due_at, id) > (?, ?) ORDER BY next_due_at, id LIMIT 1",
    );
    // A stale entry counts too: the alarm it brings passes it (`dueJobs`).
    const carried = first(
      "SELECT next_due_at FROM runs WHERE next_due_at IS NOT NULL AND (next_due_at, job_id) > (?, ?) ORDER BY next_due_at, job_id LIMIT 1",
    );
    return own === null || carried === null ? (own ?? carried) : Math.min(own, carried);
  }

  /** The job, due at `dueAt` (in `jobs_next_due`), has been fired. */
  covers(dueAt: number, jobId: string): boolean {
    return behind({ dueAt, jobId }, this.positions().fired);
  }

  /**
   * The job as it stands: its next fire the newest of its entries (a recurring job's is on its
   * latest run); none once the alarm fired that entry. A job whose row's entry has fired (the
   * position passed it, or a newer entry replaced it) says which fire that was (`firedAt`).
   */
  live(job: ShardJob): ShardJob {
    if (job.frequent || job.dueAt === null) return job;
    const carried = this.carriedBy(job);
    const current = carried ? { ...job, ...carried } : job;
    const firedAt = carried !== null || this.covers(job.dueAt, job.id) ? job.nextFireAt : null;
    return { ...(this.covers(current.dueAt as number, job.id) ? asFired(current) : current), firedAt };
  }

  /**
   * The alarm read the job by an entry that is stale (`dueJobs`) or that a newer one has
   * replaced (read again after a restart: the fire it names was made, or passed over by the
   * misfire policy, by the fire that wrote the newer one). It is passed without a fire. Only an
   * entry due before the positions were read can have been read before, so only such a one
   * costs the read for a newer entry (with a minute for another machine's clock after a move).
   */
  superseded(job: ShardJob): boolean {
    if (job.stale === true) return true;
    const mayBeReread = job.dueAt !== null && job.dueAt <= this.readAt + CLOCK_SKEW_MS;
    return !job.frequent && mayBeReread && this.carriedBy(job) !== null;
  }

  /**
   * The newest entry a run of the job carries for its current version, if newer than the one
   * `job` holds (its row's, or the run's it was read by). Runs fired from that entry's fire on
   * are one range of the runs' key (a scheduled run's id sorts as its instant), read from its
   * newest end: the job's latest run carries it.
   */
  private carriedBy(job: ShardJob): Pick<ShardJob, "nextFireAt" | "dueAt" | "fires"> | null {
    if (job.nextFireAt === null || job.spec.schedule.at !== undefined) return null; // a one-off job's runs carry nothing
    const row = this.sql
      .exec(
        `SELECT next_fire_at, next_due_at, next_fires FROM runs WHERE id >= ? AND id < ? AND next_version = ? AND next_fire_at > ?
         ORDER BY id DESC LIMIT 1`,
        scheduledRunId(job.id, job.nextFireAt),
        runKeyRange(job.id)[1],
        job.version,
        job.nextFireAt,
      )
      .toArray()[0];
    return row ? { nextFireAt: row.next_fire_at as number, dueAt: row.next_due_at as number, fires: row.next_fires as number } : null;
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
    this.noteUnwritten(unwritten);
  }

  /** How far the alarm has fired: retention keeps a run whose entry is still ahead of it. */
  passedThrough(): DuePosition {
    return this.positions().fired ?? BEFORE_ALL;
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

  /** A change rolled back: the position is read from storage again (the jobs after it are fired again, to no effect). */
  forget(): void {
    this.#positions = undefined;
    this.#unwritten = 0;
  }
}

/** The job as it reads once its row's fire (`nextFireAt`) was made: nothing more to fire. */
function asFired(job: ShardJob): ShardJob {
  return { ...job, nextFireAt: null, dueAt: null, firedAt: job.nextFireAt };
}

/** Rows of two queries, each in the order of entries (`next_due_at`, `entry_job`), as one, up to `limit` rows and `maxBytes` of specs (at least one row). */
function inOrder(a: Row[], b: Row[], limit: number, maxBytes: number): Row[] {
  const key = (r: Row): DuePosition => ({ dueAt: r.next_due_at as number, jobId: r.entry_job as string });
  const merged: Row[] = [];
  let bytes = 0;
  let i = 0;
  let j = 0;
  while (merged.length < limit && (i < a.length || j < b.length)) {
    const takeA = j >= b.length || (i < a.length && behind(key(a[i]!), key(b[j]!)));
    const next = takeA ? a[i]! : b[j]!;
    bytes += (next.spec as string).length;
    if (merged.length > 0 && bytes > maxBytes) break;
    merged.push(next);
    if (takeA) i++;
    else j++;
  }
  return merged;
}

/** `p` is at or before `position`. */
function behind(p: DuePosition, position: DuePosition | null): boolean {
  return position !== null && (p.dueAt < position.dueAt || (p.dueAt === position.dueAt && p.jobId <= position.jobId));
}
