import type { ArchivedRun } from "../archive/run-archive";
import type { ArchiveHealth } from "../protocol/shard-rpc";
import type { RunRow } from "../protocol/stored-rows";
import type { HistoryStore } from "./history-store";
import type { ShardHost } from "./host";
import type { ShardJob } from "./rows";
import type { ShardStore } from "./store";

/** Finished runs stay this long unless the job says otherwise. */
const DEFAULT_RETENTION_DAYS = 7;
/** A job keeps at most this many of its newest runs unless it says otherwise. */
const DEFAULT_RETENTION_RUNS = 1_000;
/** A shard looks for expired history this often. */
const RETENTION_EVERY_MS = 10 * 60_000;
/** Runs removed per pass: small, so that a pass never holds the shard long. */
export const RETENTION_CHUNK = 500;
/** With a backlog left, the next pass waits this long: history work never crowds out runs. */
const BACKLOG_PAUSE_MS = 1_000;
/** Jobs looked at per pass. */
const JOBS_PER_PASS = 100;
const DAY_MS = 86_400_000;

/** After a failed archive write the pass is tried again this long after, doubling with each failure in a row... */
const ARCHIVE_RETRY_FIRST_MS = 5_000;
/** ...up to the interval of passes: an archive down for hours costs the shard one attempt every 10 minutes. */
export const ARCHIVE_RETRY_MAX_MS = RETENTION_EVERY_MS;

const NEXT_PASS = "retention_next_at";
const CURSOR = "retention_cursor";
const ARCHIVE_FAILURES = "retention_archive_failures";
const ARCHIVE_ERROR = "retention_archive_error";

/**
 * How long a pass waits for the archive's write: past it the write counts as failed (the
 * runs stay, the pass backs off as for any failure), so that a hung R2 put cannot hold the
 * shard's alarm, and every call waiting behind it, for ever. An object, so that tests in the
 * shard's isolate can shorten it, as they arm faults (src/faults.ts).
 */
export const ARCHIVE_WRITE_TIMEOUT = { ms: 20_000 };

/**
 * `write`, or a failure once `ms` passed without its answer. The write itself goes on: if it
 * lands late, the next pass writes the runs again under another pass, and readers keep one
 * copy per run id (run-archive.ts).
 */
async function bounded(write: Promise<void>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | null = null;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the archive write had no answer in ${ms} ms`)), ms);
  });
  try {
    await Promise.race([write, late]);
  } finally {
    if (timer !== null) clearTimeout(timer);
  }
}

/** The wait before the next pass after `failures` failed archive writes in a row. */
export function archiveRetryDelay(failures: number): number {
  return Math.min(ARCHIVE_RETRY_FIRST_MS * 2 ** Math.max(0, failures - 1), ARCHIVE_RETRY_MAX_MS);
}

/** Where expired history goes before it leaves the shard; null: it is only deleted. */
export type Archive = ((shard: string, runs: ArchivedRun[]) => Promise<void>) | null;

/**
 * Retention: a shard's history is kept for a window and up to a cap per job, then archived and
 * removed, so that a shard's size and its cost per call stay flat however long it runs. Passes
 * run on the alarm after its due work, remove at most RETENTION_CHUNK runs each, and walk the
 * jobs from a cursor kept in the shard, so a long backlog is worked off a chunk at a time.
 */
export class Retention {
  constructor(
    private readonly host: Pick<ShardHost, "name" | "change">,
    private readonly history: HistoryStore,
    private readonly store: Pick<ShardStore, "getTenant" | "beforeRemoval" | "firedThrough">,
    private readonly archive: Archive,
  ) {}

  /**
   * When the next pass is due, as last read or written: asked after every call the shard
   * answers, so it is read from storage once, not each time. A write that rolled back can leave
   * it wrong only until that pass: `pass` reads storage itself.
   */
  #nextAt: number | null | undefined;

  /** A change of the shard's state that may remove runs: the alarm's position is written first (`ShardStore.beforeRemoval`). */
  private transaction<T>(apply: () => T): T {
    return this.host.change(() => this.store.beforeRemoval(apply));
  }

  /** A shard that holds jobs looks for expired history from now on. */
  schedule(now: number): void {
    if (this.storedNextPass() === null) this.setNextPass(now + RETENTION_EVERY_MS);
  }

  nextDue(): number | null {
    if (this.#nextAt === undefined) this.#nextAt = this.storedNextPass();
    return this.#nextAt;
  }

  private storedNextPass(): number | null {
    const next = this.history.getMeta(NEXT_PASS);
    return next === null ? null : Number(next);
  }

  private setNextPass(at: number): void {
    this.history.setMeta(NEXT_PASS, String(at));
    this.#nextAt = at;
  }

  /**
   * One pass, if one is due: picks expired runs (read only), archives them, then removes them
   * in one transaction. A crash between the archive and the removal archives them again on
   * the next pass; readers of the archive keep one copy per run id.
   */
  async pass(now: number): Promise<{ removed: number } | null> {
    const due = this.storedNextPass();
    this.#nextAt = due;
    if (due === null || due > now) return null;
    const cursor = this.history.getMeta(CURSOR) ?? "";
    const jobs = this.history.jobsAfter(cursor, JOBS_PER_PASS);
    const expired: RunRow[] = [];
    let reached = cursor;
    for (const job of jobs) {
      const tenant = this.store.getTenant(job.tenantId);
      expired.push(...this.expiredRuns(job, tenant?.retentionDays ?? null, now, RETENTION_CHUNK - expired.length));
      if (expired.length >= RETENTION_CHUNK) break; // this job may hold more: the next pass starts at it again
      reached = job.id;
    }
    const full = expired.length >= RETENTION_CHUNK;
    const failures = this.archiveFailures();
    if (expired.length > 0 && this.archive) {
      try {
        await bounded(this.archive(this.host.name(), this.withAttempts(expired)), ARCHIVE_WRITE_TIMEOUT.ms);
      } catch (err) {
        this.archiveFailed(failures + 1, err, now);
        return { removed: 0 };
      }
    }
    const removed = this.transaction(() => {
      if (failures > 0) {
        this.history.deleteMeta(ARCHIVE_FAILURES);
        this.history.deleteMeta(ARCHIVE_ERROR);
      }
      const gone = this.history.removeFinishedRuns(expired.map((r) => r.id));
      for (const job of jobs) {
        if (job.id > reached) break;
        // A message (held by its shard alone) leaves with its run, as a deleted job does.
        if (job.deleted || (job.standalone && this.store.firedThrough.live(job).nextFireAt === null)) this.history.purgeJob(job.id);
      }
      const wrapped = !full && jobs.length < JOBS_PER_PASS;
      this.history.setMeta(CURSOR, wrapped ? "" : reached);
      // More to do: the next pass comes shortly; done: in a while.
      this.setNextPass(now + (wrapped ? RETENTION_EVERY_MS : BACKLOG_PAUSE_MS));
      return gone.length;
    });
    return { removed };
  }

  /**
   * The archive refused the pass's runs: nothing is removed (they leave only once archived),
   * and the next pass waits, longer after each failure in a row. Without the wait the pass's
   * time stays in the past, and every call's settle would point the alarm at it again: an
   * alarm that never stops while the archive is down. The rest of the alarm's work is done by
   * then; the failure is not thrown, so the runtime does not retry the alarm for it either.
   */
  private archiveFailed(failures: number, err: unknown, now: number): void {
    const retryAt = now + archiveRetryDelay(failures);
    const message = err instanceof Error ? err.message : String(err);
    this.transaction(() => {
      this.history.setMeta(ARCHIVE_FAILURES, String(failures));
      this.history.setMeta(ARCHIVE_ERROR, message);
      this.setNextPass(retryAt);
    });
    console.error(
      `shard ${this.host.name()}: archive write failed (${failures} in a row), nothing removed; next try at ${new Date(retryAt).toISOString()}: ${message}`,
    );
  }

  private archiveFailures(): number {
    return Number(this.history.getMeta(ARCHIVE_FAILURES) ?? 0);
  }

  archiveHealth(): ArchiveHealth {
    const failures = this.archiveFailures();
    return {
      consecutiveFailures: failures,
      nextRetryAt: failures > 0 ? this.storedNextPass() : null,
      lastError: failures > 0 ? this.history.getMeta(ARCHIVE_ERROR) : null,
    };
  }

  /** The job's finished runs past its window or beyond its cap, oldest first. */
  private expiredRuns(job: ShardJob, tenantDays: number | null, now: number, limit: number): RunRow[] {
    if (limit <= 0) return [];
    const { days, maxRuns } = retentionOf(job, tenantDays);
    const keptFrom = this.history.keptFrom(job.id, maxRuns);
    const before = Math.max(now - days * DAY_MS, keptFrom ?? -Infinity);
    return this.history.finishedRunsBefore(job.id, before, limit);
  }

  private withAttempts(runs: RunRow[]): ArchivedRun[] {
    const attempts = Map.groupBy(this.history.attemptsOf(runs.map((r) => r.id)), (a) => a.runId);
    const shard = this.host.name();
    return runs.map((run) => ({
      ...run,
      shard,
      attemptLog: (attempts.get(run.id) ?? []).map(({ completionToken: _token, runId: _run, ...attempt }) => attempt),
    }));
  }
}

/** The job's retention: its own setting, else its tenant's days, else the defaults. A deleted job's runs go by the same rule. */
function retentionOf(job: Pick<ShardJob, "spec">, tenantDays: number | null): { days: number; maxRuns: number } {
  return {
    days: job.spec.retention?.days ?? tenantDays ?? DEFAULT_RETENTION_DAYS,
    maxRuns: job.spec.retention?.maxRuns ?? DEFAULT_RETENTION_RUNS,
  };
}
