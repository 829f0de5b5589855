import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { armFault, disarmFaults, faultCounts } from "../../src/faults";
import { scheduledRunId } from "../../src/model/ids";
import type { JobSpec } from "../../src/model/job";
import type { JobDefinition } from "../../src/protocol/stored-rows";
import type { Shard } from "../../src/shard/shard";
import { makeDue, type Row, rows, unwatchedRuns } from "./entries";
import { definition, receiverPath, runRetention, specLike } from "./helpers";

/**
 * A recurring job's next fire carried by the run its fire makes (src/shard/fired-through.ts,
 * docs/cost.md "A recurring job's next fire"): the fire leaves the job's row as it was; the
 * alarm finds the next fire on the run. What must hold: the job reads its next fire from its
 * latest run; a lost dispatch is sent again (by its lease: src/shard/leases.ts); a change makes
 * the runs' entries stale, and a dispatched run keeps its lease through it; a pause and a resume
 * keep the next fire; a restart fires nothing twice; retention keeps a run while its entry is
 * still needed.
 */

const HOUR = 3_600_000;

/** An hourly job whose first fire is `at`, a second from now, applied to a shard of the test's own. */
async function hourlyJob(shardName: string, name: string, extra: Partial<JobSpec> = {}) {
  const shard = env.SHARD.get(env.SHARD.idFromName(shardName));
  const at = Date.now() + 1_000;
  const spec = await specLike({ every: "1h", startAt: new Date(at).toISOString() }, receiverPath(name));
  const job = definition({ ...spec, ...extra }, Date.now());
  await shard.applyJobs([job]);
  return { shard, at, job };
}

/** Waits until `at`, then runs the alarm (the runtime's own may have come first). */
async function fireAt(shard: DurableObjectStub<Shard>, at: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now())));
  await runDurableObjectAlarm(shard);
}

async function untilSucceeded(shard: DurableObjectStub<Shard>, runIds: string[]): Promise<void> {
  await vi.waitFor(
    async () => {
      const runs = await rows(shard, "SELECT id, state FROM runs");
      expect(Object.fromEntries(runs.map((r) => [r.id, r.state]))).toEqual(Object.fromEntries(runIds.map((id) => [id, "succeeded"])));
    },
    { timeout: 20_000, interval: 100 },
  );
}

/** The job's newest run carrying an entry, as `runs_next` holds it. */
async function carrier(shard: DurableObjectStub<Shard>, job: JobDefinition): Promise<Row | undefined> {
  const [row] = await rows(
    shard,
    "SELECT id, next_fire_at, next_due_at, next_version FROM runs WHERE job_id = ? AND next_fire_at IS NOT NULL ORDER BY id DESC LIMIT 1",
    job.id,
  );
  return row;
}

/**
 * The run, its dispatch held back (the Queue refusing sends), once it is dispatched (its attempt
 * begun, its lease listed): its row. The runtime may run the alarm by itself, concurrently with the test's.
 */
async function heldInQueue(shard: DurableObjectStub<Shard>, runId: string): Promise<Row> {
  return vi.waitFor(
    async () => {
      const [run] = await rows(shard, "SELECT state, due_at, fence FROM runs WHERE id = ?", runId);
      expect(run).toMatchObject({ state: "running", due_at: null });
      expect(await leasedRuns(shard)).toContain(`${runId}#${run!.fence}`);
      return run!;
    },
    { timeout: 5_000, interval: 20 },
  );
}

/** The runs, with their fences, that the shard's lease rows list (src/shard/leases.ts). */
async function leasedRuns(shard: DurableObjectStub<Shard>): Promise<string[]> {
  const leases = await rows(shard, "SELECT runs FROM leases");
  return leases.flatMap((r) => (JSON.parse(r.runs as string) as Array<[string, number]>).map(([id, fence]) => `${id}#${fence}`));
}

/** Makes the job's next fire due now where it stands (on its latest run, once one carries it); returns its instant. */
async function carriedDueNow(shard: DurableObjectStub<Shard>, job: JobDefinition): Promise<number> {
  const at = Date.now() - 1;
  await makeDue(shard, [job.id], at);
  return at;
}

const nextRunAt = async (shard: DurableObjectStub<Shard>, job: JobDefinition) => (await shard.jobRuntimes([job.id]))[0]!.nextRunAt;

describe("a recurring job's next fire, carried by its latest run", () => {
  afterEach(() => disarmFaults());

  it("a fire leaves the job's row as it was and writes the next fire on its run; the job reads it there; the alarm fires it", async () => {
    const { shard, at, job } = await hourlyJob("shard-900401", "carried-fires");
    await fireAt(shard, at);
    await untilSucceeded(shard, [scheduledRunId(job.id, at)]);

    expect(await rows(shard, "SELECT next_fire_at, next_due_at, fires FROM jobs")).toEqual([
      { next_fire_at: at, next_due_at: at, fires: 0 },
    ]);
    expect(await carrier(shard, job)).toEqual({
      id: scheduledRunId(job.id, at),
      next_fire_at: at + HOUR,
      next_due_at: at + HOUR,
      next_version: 1,
    });
    expect(await shard.jobRuntimes([job.id])).toMatchObject([{ nextRunAt: at + HOUR, completed: false }]);
    // The alarm waits for the run's claim deadline (the entry that fired it), then for the next fire.
    expect(await runInDurableObject(shard, (_s: Shard, state) => state.storage.getAlarm())).toBeLessThanOrEqual(at + HOUR);

    const second = await carriedDueNow(shard, job);
    await runDurableObjectAlarm(shard);
    await untilSucceeded(shard, [scheduledRunId(job.id, at), scheduledRunId(job.id, second)]);
    expect(await carrier(shard, job)).toMatchObject({ id: scheduledRunId(job.id, second), next_fire_at: at + HOUR });
    expect(await rows(shard, "SELECT next_fire_at, fires FROM jobs")).toEqual([{ next_fire_at: at, fires: 0 }]);
    // Neither run has a claim deadline of its own: each one's is the entry that fired it.
    expect(await rows(shard, "SELECT due_at FROM runs WHERE due_at IS NOT NULL")).toEqual([]);
  });

  it("a dispatch lost with the shard's memory is sent again when its lease ends", async () => {
    const name = "shard-900402";
    const { shard, at, job } = await hourlyJob(name, "carried-lost");
    await fireAt(shard, at);
    await untilSucceeded(shard, [scheduledRunId(job.id, at)]);

    // The second fire comes from the first run's entry; the alarm (the runtime's, which retries
    // one that throws) commits it, then dies before sending; the shard is evicted, the dispatch with it.
    const second = await carriedDueNow(shard, job);
    const lost = scheduledRunId(job.id, second);
    const faults = faultCounts.get("shard.afterCommit") ?? 0;
    armFault("shard.afterCommit", 1, name);
    await runInDurableObject(shard, (_s: Shard, state) => state.storage.setAlarm(Date.now()));
    await vi.waitFor(() => expect(faultCounts.get("shard.afterCommit")).toBe(faults + 1), { timeout: 10_000, interval: 10 });
    await evictDurableObject(shard);
    expect(await rows(shard, "SELECT state, due_at FROM runs WHERE id = ?", lost)).toEqual([{ state: "running", due_at: null }]);
    expect(await leasedRuns(shard)).toContain(`${lost}#1`);

    // Its lease ends (made to end now rather than waited for).
    await rows(shard, "UPDATE runs SET lease_until = ?1 WHERE id = ?2", Date.now() - 1, lost);
    await rows(shard, "UPDATE leases SET due_at = ?1 WHERE runs LIKE ?2", Date.now() - 1, `%${lost}%`);
    await evictDurableObject(shard);
    await runDurableObjectAlarm(shard);
    await untilSucceeded(shard, [scheduledRunId(job.id, at), lost]);
    expect(await rows(shard, "SELECT redispatches FROM runs WHERE id = ?", lost)).toEqual([{ redispatches: 1 }]);
    expect(await nextRunAt(shard, job)).toBe(at + HOUR);
  });

  it("a change writes the next fire on the row again: the runs' entries are stale, and the dispatched run keeps its lease", async () => {
    const name = "shard-900403";
    const { shard, at, job } = await hourlyJob(name, "carried-changed");
    armFault("shard.queueSend", Infinity, name); // the run's dispatch reaches no consumer
    await fireAt(shard, at);
    const first = scheduledRunId(job.id, at);
    const queued = await heldInQueue(shard, first);

    const [runtime] = await shard.applyJobs([{ ...job, version: 2, spec: { ...job.spec, timeoutMs: 20_000 } }]);
    expect(runtime).toMatchObject({ nextRunAt: at + HOUR, completed: false });
    expect(await rows(shard, "SELECT next_fire_at, next_due_at, version FROM jobs")).toEqual([
      { next_fire_at: at + HOUR, next_due_at: at + HOUR, version: 2 },
    ]);
    expect(await rows(shard, "SELECT state, due_at FROM runs WHERE id = ?", first)).toEqual([{ state: "running", due_at: null }]);
    expect(await leasedRuns(shard)).toContain(`${first}#${queued.fence}`);

    // The run's entry, of version 1, fires nothing however due it is.
    await rows(shard, "UPDATE runs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", Date.now() - 1, first);
    await runDurableObjectAlarm(shard);
    expect((await rows(shard, "SELECT id FROM runs")).map((r) => r.id)).toEqual([first]);

    // A new schedule starts from now, on the row.
    const changed = await shard.applyJobs([{ ...job, version: 3, spec: { ...job.spec, schedule: { every: "2h" } } }]);
    expect(changed[0]!.nextRunAt).toBeGreaterThan(Date.now() + HOUR);
  });

  it("a change after a restart, before the alarm read the job again, leaves the dispatched run its lease", async () => {
    const name = "shard-900410";
    const { shard, at, job } = await hourlyJob(name, "carried-changed-restart");
    armFault("shard.queueSend", Infinity, name);
    await fireAt(shard, at);
    const first = scheduledRunId(job.id, at);
    const queued = await heldInQueue(shard, first);
    // The position that passed the row's entry was not written: the shard no longer knows it fired.
    await evictDurableObject(shard);
    await shard.applyJobs([{ ...job, version: 2, spec: { ...job.spec, timeoutMs: 20_000 } }]);
    expect(await rows(shard, "SELECT state, due_at FROM runs WHERE id = ?", first)).toEqual([{ state: "running", due_at: null }]);
    expect(await leasedRuns(shard)).toContain(`${first}#${queued.fence}`);
    expect(await nextRunAt(shard, job)).toBe(at + HOUR);
  });

  it("a fire that writes the job's row (its run made already, by a backfill) leaves the dispatched run its lease", async () => {
    const name = "shard-900408";
    const { shard, at, job } = await hourlyJob(name, "carried-row-moved");
    armFault("shard.queueSend", Infinity, name); // the first run's dispatch reaches no consumer
    await fireAt(shard, at);
    const first = scheduledRunId(job.id, at);
    const queued = await heldInQueue(shard, first);
    // The next fire, made due now, already has its run: the fire carries nothing and moves the row.
    const second = await carriedDueNow(shard, job);
    await rows(
      shard,
      `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, created_at, finished_at)
       VALUES (?, ?, 1, 'backfill', ?, 'succeeded', 1, 1, ?, ?)`,
      scheduledRunId(job.id, second),
      job.id,
      second,
      second,
      second,
    );
    await runDurableObjectAlarm(shard);
    expect(await rows(shard, "SELECT next_fire_at FROM jobs")).toEqual([{ next_fire_at: at + HOUR }]);
    expect(await rows(shard, "SELECT state, due_at FROM runs WHERE id = ?", first)).toEqual([{ state: "running", due_at: null }]);
    expect(await leasedRuns(shard)).toContain(`${first}#${queued.fence}`);
  });

  it("a job with maxRuns counts its fires on its runs, through a change, and stops at its count", async () => {
    const base = await hourlyJob("shard-900409", "carried-max-runs");
    const { shard, at } = base;
    const job = { ...base.job, spec: { ...base.job.spec, schedule: { ...base.job.spec.schedule, maxRuns: 3 } } };
    await shard.applyJobs([{ ...job, version: 2 }]);
    await fireAt(shard, at);
    const made = [scheduledRunId(job.id, at)];
    await untilSucceeded(shard, made);
    expect(await carrier(shard, job)).toMatchObject({ next_fire_at: at + HOUR, next_version: 2 });
    expect(await rows(shard, "SELECT next_fires FROM runs")).toEqual([{ next_fires: 1 }]);

    // The second fire comes from the first run's entry; a change after it writes the count on the row.
    made.push(scheduledRunId(job.id, await carriedDueNow(shard, job)));
    await runDurableObjectAlarm(shard);
    await untilSucceeded(shard, made);
    await shard.applyJobs([{ ...job, version: 3, spec: { ...job.spec, timeoutMs: 20_000 } }]);
    expect(await rows(shard, "SELECT fires, next_fire_at FROM jobs")).toEqual([{ fires: 2, next_fire_at: at + HOUR }]);

    // The third, from the row, is the last: none is left after it.
    const third = Date.now() - 1;
    await rows(shard, "UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1", third);
    await runDurableObjectAlarm(shard);
    made.push(scheduledRunId(job.id, third));
    await untilSucceeded(shard, made);
    expect(await shard.jobRuntimes([job.id])).toMatchObject([{ nextRunAt: null, completed: true }]);
    expect(await rows(shard, "SELECT fires FROM jobs")).toEqual([{ fires: 3 }]);
  });

  it("a pause and a resume keep the next fire the latest run carries", async () => {
    const { shard, at, job } = await hourlyJob("shard-900404", "carried-paused");
    await fireAt(shard, at);
    await untilSucceeded(shard, [scheduledRunId(job.id, at)]);

    const [paused] = await shard.applyJobs([{ ...job, version: 2, paused: true }]);
    expect(paused).toMatchObject({ nextRunAt: null, completed: false });
    const [resumed] = await shard.applyJobs([{ ...job, version: 3, paused: false }]);
    expect(resumed).toMatchObject({ nextRunAt: at + HOUR, completed: false });
    expect(await rows(shard, "SELECT next_fire_at, next_due_at FROM jobs")).toEqual([{ next_fire_at: at + HOUR, next_due_at: at + HOUR }]);
  });

  it("a shard that lost its memory passes over the entries it reads again, replaced by newer ones", async () => {
    const { shard, at, job } = await hourlyJob("shard-900405", "carried-restart");
    await fireAt(shard, at);
    await untilSucceeded(shard, [scheduledRunId(job.id, at)]);
    const second = await carriedDueNow(shard, job);
    await runDurableObjectAlarm(shard);
    const made = [scheduledRunId(job.id, at), scheduledRunId(job.id, second)];
    await untilSucceeded(shard, made);
    expect(await rows(shard, "SELECT value FROM meta WHERE key = 'fired_through'")).toEqual([]); // not written yet

    await evictDurableObject(shard);
    await runDurableObjectAlarm(shard);
    await untilSucceeded(shard, made);
    expect(await nextRunAt(shard, job)).toBe(at + HOUR);
    // The entries read again had been replaced by newer ones: passed over, with nothing written.
    expect(await rows(shard, "SELECT next_fire_at, fires FROM jobs")).toEqual([{ next_fire_at: at, fires: 0 }]);
  });

  it("a fire looks for a newer entry of its job only when its entry was due before the shard read its positions", async () => {
    const { shard, at, job } = await hourlyJob("shard-900412", "carried-reread");
    await fireAt(shard, at);
    const made = [scheduledRunId(job.id, at)];
    await untilSucceeded(shard, made);
    /** Fires the job's carried entry, due now, with the positions read `readAgo` ms before: the statements that asked for a newer entry. */
    const fire = async (readAgo: number) => {
      const due = await carriedDueNow(shard, job);
      const asked = await runInDurableObject(shard, async (instance: Shard) => {
        const through = (instance as unknown as { store: { firedThrough: unknown } }).store.firedThrough as {
          readAt: number;
          sql: { exec: (query: string, ...bindings: unknown[]) => unknown };
        };
        through.readAt = Date.now() - readAgo;
        const exec = through.sql.exec;
        const queries: string[] = [];
        through.sql.exec = (query, ...bindings) => {
          queries.push(query);
          return exec(query, ...bindings);
        };
        try {
          await instance.alarm();
        } finally {
          through.sql.exec = exec;
        }
        return queries.filter((q) => q.includes("ORDER BY id DESC LIMIT 1") && q.includes("next_version = ?"));
      });
      made.push(scheduledRunId(job.id, due));
      await untilSucceeded(shard, made);
      return asked;
    };
    // Read just now: the entry may be one read again after a restart, so a newer one is looked for.
    expect(await fire(0)).toHaveLength(1);
    // Read two minutes ago, past any clock skew: this shard fired everything due since, so no newer entry can exist.
    expect(await fire(2 * 60_000)).toEqual([]);
    expect(await carrier(shard, job)).toMatchObject({ id: made.at(-1), next_fire_at: at + HOUR });
    expect(await rows(shard, "SELECT next_fire_at, fires FROM jobs")).toEqual([{ next_fire_at: at, fires: 0 }]);
  });

  it("through changes of every kind and a restart, no dispatched or running run is left with nobody to look at it", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900407"));
    // Runs that take 3 s, so that some are running at each check, and some still queued.
    const spec = await specLike({ every: "1h" }, receiverPath("carried-watched", "delayMs=3000"));
    const jobs = [0, 1, 2].map(() => definition(spec, Date.now()));
    await shard.applyJobs(jobs);
    let openSeen = 0;
    const check = async (step: string) => {
      const { unwatched, open } = await unwatchedRuns(shard);
      openSeen += open;
      expect(unwatched, step).toEqual([]);
    };
    /** Each job's next fire made due now where it is (its row's entry, or its latest run's), and fired. */
    const fireAll = async (fired: JobDefinition[]) => {
      await makeDue(
        shard,
        fired.map((j) => j.id),
        Date.now() - 1,
      );
      await runDurableObjectAlarm(shard);
    };
    const [a, b, c] = jobs as [JobDefinition, JobDefinition, JobDefinition];
    await fireAll(jobs);
    await check("first fires, from the jobs' rows");
    await shard.applyJobs([{ ...a, version: 2, spec: { ...a.spec, timeoutMs: 20_000 } }]);
    await check("a changed while its run is open");
    await fireAll(jobs);
    await check("second fires, from the runs' entries and a's row");
    await shard.applyJobs([{ ...b, version: 2, paused: true }]);
    await check("b paused");
    await shard.applyJobs([{ ...b, version: 3, paused: false }]);
    await fireAll([a, b]);
    await check("b resumed, a and b fired");
    await shard.applyJobs([{ ...c, version: 2, spec: { ...c.spec, schedule: { every: "2h" } } }]);
    await check("c's schedule changed");
    await evictDurableObject(shard);
    await check("the shard lost its memory");
    await fireAll(jobs);
    await check("all fired after the restart");
    await shard.applyJobs([{ ...a, version: 3, deleted: true }]);
    await check("a deleted");
    expect(openSeen).toBeGreaterThan(0); // the checks looked at open runs, not only at an empty shard
  });

  it("the entries a change made stale are read once, as the alarm passes them, not by every call", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900411"));
    const spec = await specLike({ every: "1h" }, receiverPath("carried-stale"));
    const jobs = Array.from({ length: 300 }, () => definition(spec, Date.now()));
    await shard.applyJobs(jobs);
    const at = Date.now() - 1;
    await rows(shard, "UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1", at);
    await runDurableObjectAlarm(shard);
    await untilSucceeded(
      shard,
      jobs.map((j) => scheduledRunId(j.id, at)),
    );
    // Every job changes: each run's entry is stale now, each job's next fire on its row again.
    await shard.applyJobs(jobs.map((j) => ({ ...j, version: 2, spec: { ...j.spec, timeoutMs: 20_000 } })));
    // Rows read by everything but the meter's own reading (metrics reads the shard's runs).
    const rowsRead = async () =>
      Object.entries((await shard.metrics(3_600_000)).cost.byOperation)
        .filter(([operation]) => operation !== "metrics")
        .reduce((n, [, o]) => n + o.rowsRead, 0);
    const before = await rowsRead();
    for (let i = 0; i < 5; i++) await shard.jobRuntimes([jobs[0]!.id]);
    // Each call reads its job and asks when the alarm is next due: a few rows, not the 300 stale entries.
    expect((await rowsRead()) - before).toBeLessThan(100);

    // Due, the stale entries are read by the alarm, which passes them with no fire and waits for what comes next.
    const due = Date.now() - 1;
    await rows(shard, "UPDATE runs SET next_fire_at = ?1, next_due_at = ?1", due);
    await runDurableObjectAlarm(shard);
    expect((await rows(shard, "SELECT COUNT(*) AS n FROM runs"))[0]!.n).toBe(300);
    expect(await runInDurableObject(shard, (_s: Shard, state) => state.storage.getAlarm())).toBeGreaterThan(Date.now() + 10_000);
  });

  it("retention keeps the run holding its job's next fire, and removes it once that fire was made", async () => {
    const { shard, at, job } = await hourlyJob("shard-900406", "carried-retention", { retention: { days: 1 } });
    await fireAt(shard, at);
    const first = scheduledRunId(job.id, at);
    await untilSucceeded(shard, [first]);
    // The run is made days old: past the job's window, yet it holds the job's next fire.
    await rows(shard, "UPDATE runs SET scheduled_at = scheduled_at - 3 * 86400000");
    await runRetention(shard);
    expect((await rows(shard, "SELECT id FROM runs")).map((r) => r.id)).toEqual([first]);

    // The next fire is made, and the alarm has passed the first run's entry: the first run leaves.
    const second = scheduledRunId(job.id, await carriedDueNow(shard, job));
    await runDurableObjectAlarm(shard);
    await untilSucceeded(shard, [first, second]);
    await runRetention(shard);
    expect((await rows(shard, "SELECT id FROM runs")).map((r) => r.id)).toEqual([second]);
    expect(await nextRunAt(shard, job)).toBe(at + HOUR);
  });
});
