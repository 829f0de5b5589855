import { runInDurableObject } from "cloudflare:test";
import type { Shard } from "../../src/shard/shard";
import type { ShardStore } from "../../src/shard/store";

/**
 * What a shard's entries (src/shard/fired-through.ts: a job's row's in `jobs_next_due`, a run's
 * in `runs_next`) must always give, read straight from its storage and its positions in memory.
 */

export type Row = Record<string, SqlStorageValue>;

export const rows = (shard: DurableObjectStub<Shard>, query: string, ...bindings: SqlStorageValue[]) =>
  runInDurableObject(shard, (_s: Shard, state) => state.storage.sql.exec(query, ...bindings).toArray() as Row[]);

const positionsOf = (instance: Shard) => (instance as unknown as { store: ShardStore }).store.firedThrough.passedThrough();

const after = (e: Row, p: { dueAt: number; jobId: string }) =>
  Number(e.next_due_at) > p.dueAt || (Number(e.next_due_at) === p.dueAt && String(e.job_id) > p.jobId);

/**
 * Runs of the shard whose attempt is under way (dispatched, executing or accepted) or due to
 * start, that nobody would look at again: no due time of their own, and listed in no lease row
 * (src/shard/leases.ts) under their current fence. A run a lost dispatch left there would never
 * run: always empty. (A workflow run has no attempt of its own: its steps are what run.)
 */
export async function unwatchedRuns(shard: DurableObjectStub<Shard>): Promise<{ unwatched: Row[]; open: number }> {
  return runInDurableObject(shard, (_instance: Shard, state) => {
    const sql = state.storage.sql;
    const leased = new Set(
      sql
        .exec("SELECT runs FROM leases")
        .toArray()
        .flatMap((r) => (JSON.parse(r.runs as string) as Array<[string, number]>).map(([id, fence]) => `${id}#${fence}`)),
    );
    const open = sql
      .exec(
        "SELECT id, job_id, state, due_at, fence FROM runs WHERE state = 'queued' OR (state = 'running' AND a_outcome IN ('running', 'accepted'))",
      )
      .toArray();
    return {
      unwatched: open.filter((r) => r.due_at === null && !leased.has(`${r.id}#${r.fence}`)),
      open: open.length,
    };
  });
}

/**
 * Each live, unpaused, not frequent recurring job of the shard, and the entries that stand for
 * its next fire after the alarm's position: its row's, and its runs' of its version. One at
 * least, or the job never fires again; the newest is its next fire.
 */
export async function entriesAhead(shard: DurableObjectStub<Shard>): Promise<Array<{ jobId: string; fires: number[] }>> {
  return runInDurableObject(shard, (instance: Shard, state) => {
    const sql = state.storage.sql;
    const fired = positionsOf(instance);
    const jobs = sql.exec("SELECT id, version FROM jobs WHERE paused = 0 AND deleted = 0 AND frequent = 0").toArray();
    return jobs.map((job) => {
      const own = sql
        .exec("SELECT id AS job_id, next_fire_at, next_due_at FROM jobs WHERE id = ? AND next_due_at IS NOT NULL", job.id)
        .toArray();
      const carried = sql
        .exec("SELECT job_id, next_fire_at, next_due_at FROM runs WHERE job_id = ? AND next_version = ?", job.id, job.version)
        .toArray();
      return { jobId: job.id as string, fires: [...own, ...carried].filter((e) => after(e, fired)).map((e) => Number(e.next_fire_at)) };
    });
  });
}

/**
 * Makes each job's next fire due at `at` where it stands: its newest entry of its version, on its
 * latest run once one carries it, else on its row. False for a job with none (paused).
 */
export async function makeDue(shard: DurableObjectStub<Shard>, jobIds: string[], at: number): Promise<boolean[]> {
  return runInDurableObject(shard, (_s: Shard, state) => {
    const sql = state.storage.sql;
    return jobIds.map((jobId) => {
      const row = sql.exec("SELECT next_fire_at, next_due_at, version FROM jobs WHERE id = ?", jobId).one();
      if (row.next_due_at === null) return false;
      const [run] = sql
        .exec(
          "SELECT id FROM runs WHERE job_id = ? AND next_version = ? AND next_fire_at > ? ORDER BY id DESC LIMIT 1",
          jobId,
          row.version,
          row.next_fire_at,
        )
        .toArray();
      if (run) sql.exec("UPDATE runs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", at, run.id);
      else sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", at, jobId);
      return true;
    });
  });
}
