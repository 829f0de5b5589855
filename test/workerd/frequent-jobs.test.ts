import { env, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { armFault, disarmFaults, faultCounts } from "../../src/faults";
import { scheduledRunId } from "../../src/model/ids";
import type { Job } from "../../src/model/job";
import type { Shard } from "../../src/shard/shard";
import { unwatchedRuns } from "./entries";
import { api, createJob, hitsOf, makeRunDue, receiverPath, shardOf } from "./helpers";

/**
 * Frequent jobs (src/shard/frequent-jobs.ts): a job due again within a claim timeout keeps its
 * next due time out of every index. Its runs' leases are listed like any run's (src/shard/leases.ts).
 * What must hold: it fires and its runs succeed; a dispatch lost for such a run is sent again;
 * through changes of every kind no dispatched run is left with nobody to look at it.
 */

type Row = Record<string, SqlStorageValue>;

async function jobRow(job: Job): Promise<Row> {
  return runInDurableObject(shardOf(job), (_s: Shard, state) => state.storage.sql.exec("SELECT * FROM jobs WHERE id = ?", job.id).one());
}

async function runRow(job: Job, runId: string): Promise<Row | undefined> {
  return runInDurableObject(
    shardOf(job),
    (_s: Shard, state) => state.storage.sql.exec("SELECT * FROM runs WHERE id = ?", runId).toArray()[0],
  );
}

/** A job firing every second, once its first fire has made it frequent. */
async function frequentJob(name: string): Promise<{ job: Job; url: string }> {
  const url = receiverPath(name);
  const job = await createJob({ schedule: { every: "1s" }, target: { url } });
  await vi.waitFor(async () => expect((await jobRow(job)).frequent).toBe(1), { timeout: 15_000, interval: 100 });
  return { job, url };
}

async function stop(job: Job): Promise<void> {
  expect((await api(`/v1/jobs/${job.id}`, { method: "DELETE" })).status).toBe(200);
}

describe("frequent jobs", () => {
  afterEach(() => disarmFaults());

  it("fire with their next due time in no index, and their runs succeed", async () => {
    const { job, url } = await frequentJob("freq-plain");
    await vi.waitFor(async () => expect((await hitsOf(url)).length).toBeGreaterThanOrEqual(3), { timeout: 15_000, interval: 100 });
    const row = await jobRow(job);
    expect(row.next_due_at).toBeNull();
    expect(row.soon_at).toBeGreaterThan(Date.now() - 5_000);
    const succeeded = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT COUNT(*) AS n FROM runs WHERE job_id = ? AND state = 'succeeded'", job.id).one(),
    );
    expect(succeeded.n).toBeGreaterThanOrEqual(3);
    await stop(job);
  });

  it("write their row at most once a minute; a shard that lost its memory fires again what it passed, making nothing twice", async () => {
    const { job, url } = await frequentJob("freq-lazy");
    const written = await jobRow(job);
    // Several fires later the row still says the fire that made it frequent: memory moved on alone.
    await vi.waitFor(async () => expect((await hitsOf(url)).length).toBeGreaterThanOrEqual(4), { timeout: 15_000, interval: 100 });
    const later = await jobRow(job);
    expect(later.next_fire_at).toBe(written.next_fire_at);
    const nextRunAt = async () => ((await (await api(`/v1/jobs/${job.id}`)).json()) as Job).nextRunAt;
    // The API reads the next fire from memory, not the row's.
    expect(Date.parse((await nextRunAt())!)).toBeGreaterThan(later.next_fire_at as number);
    // As after a restart: memory read again from the row, a few fires behind.
    await runInDurableObject(shardOf(job), (shard: Shard) => {
      (shard as unknown as { store: { frequent: { forget(): void } } }).store.frequent.forget();
    });
    const seen = (await hitsOf(url)).length;
    await vi.waitFor(async () => expect((await hitsOf(url)).length).toBeGreaterThanOrEqual(seen + 3), { timeout: 15_000, interval: 100 });
    await stop(job);
    const runs = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT scheduled_at FROM runs WHERE job_id = ?", job.id).toArray(),
    );
    // One run per instant, each called once: the fires passed again made nothing.
    const instants = runs.map((r) => r.scheduled_at as number);
    expect(new Set(instants).size).toBe(instants.length);
    const hits = await hitsOf(url);
    const runIds = hits.map((h) => h.headers["x-edgecron-run-id"]);
    expect(new Set(runIds).size).toBe(runIds.length);
  });

  it("a chunk of fires rolled back is fired by the alarm's retry, not at the job's next instant", async () => {
    const url = receiverPath("freq-rollback");
    // Anchored a moment from now, so that its first fire (which makes it frequent) comes soon.
    const startAt = new Date(Date.now() + 1_000).toISOString();
    const job = await createJob({ schedule: { every: "10s", startAt }, target: { url } });
    await vi.waitFor(async () => expect((await jobRow(job)).frequent).toBe(1), { timeout: 15_000, interval: 100 });
    const faults = faultCounts.get("shard.inFireChunk") ?? 0;
    armFault("shard.inFireChunk", 1, job.shard);
    await vi.waitFor(() => expect(faultCounts.get("shard.inFireChunk") ?? 0).toBe(faults + 1), { timeout: 15_000, interval: 20 });
    // Storage is back at the fire that rolled back; the shard must not keep the job's next
    // instant in memory from it, or it would wait 10 s for that instant before firing again.
    const instant = Number((await jobRow(job)).next_fire_at);
    const runId = scheduledRunId(job.id, instant);
    await vi.waitFor(async () => expect((await runRow(job, runId))?.state).toBe("succeeded"), { timeout: 15_000, interval: 100 });
    expect(Number((await runRow(job, runId))?.created_at) - instant).toBeLessThan(8_000);
    await stop(job);
  });

  it("through changes of every kind, no dispatched or running run is left with nobody to look at it", async () => {
    // Runs that take 1.5 s, fired every second: several are open at any moment.
    const url = receiverPath("freq-changes", "delayMs=1500");
    const jobs = await Promise.all([0, 1, 2].map(() => createJob({ schedule: { every: "1s" }, target: { url } })));
    const change = (job: Job, body: Record<string, unknown>) => api(`/v1/jobs/${job.id}`, { method: "PATCH", json: body });
    const action = (job: Job, verb: "pause" | "resume" | "trigger") => api(`/v1/jobs/${job.id}/${verb}`, { method: "POST" });
    let openSeen = 0;
    const check = async (step: string) => {
      await new Promise((resolve) => setTimeout(resolve, 700));
      for (const shard of new Set(jobs.map((j) => j.shard))) {
        const { unwatched, open } = await unwatchedRuns(env.SHARD.get(env.SHARD.idFromName(shard)));
        openSeen += open;
        expect(unwatched, step).toEqual([]);
      }
    };
    const [a, b, c] = jobs as [Job, Job, Job];
    await vi.waitFor(async () => expect((await Promise.all(jobs.map(jobRow))).map((r) => r.frequent)).toEqual([1, 1, 1]), {
      timeout: 15_000,
      interval: 100,
    });
    await check("all frequent");
    expect((await change(a, { schedule: { every: "2h" } })).status).toBe(200);
    await check("a slowed down");
    expect((await action(b, "pause")).status).toBe(200);
    await check("b paused");
    expect((await action(c, "trigger")).status).toBe(202);
    await check("c triggered");
    expect((await change(a, { schedule: { every: "1s" } })).status).toBe(200);
    await vi.waitFor(async () => expect((await jobRow(a)).frequent).toBe(1), { timeout: 10_000, interval: 100 });
    await check("a frequent again");
    expect((await action(b, "resume")).status).toBe(200);
    await check("b resumed");
    expect((await change(c, { target: { url: receiverPath("freq-changes-2") } })).status).toBe(200);
    await check("c's target changed");
    await stop(a);
    await check("a deleted");
    expect(openSeen).toBeGreaterThan(0); // the checks looked at open runs, not only at empty shards
    await stop(b);
    await stop(c);
  });

  it("a lost dispatch of a frequent job's run is sent again when its lease ends, and the run succeeds", async () => {
    const { job, url } = await frequentJob("freq-lost");
    // A run of its whose dispatch is lost: dispatched, listed in a lease row, never delivered.
    const at = Date.now() - 30_000;
    const lost = scheduledRunId(job.id, at);
    await runInDurableObject(shardOf(job), (_s: Shard, st) => {
      st.storage.sql.exec(
        `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, created_at, started_at, lease_until, watched,
           a_number, a_fence, a_started_at, a_outcome, a_token)
         VALUES (?1, ?2, 1, 'schedule', ?3, 'running', 1, 1, ?3, ?3, ?4, 0, 1, 1, ?3, 'running', 'token')`,
        lost,
        job.id,
        at,
        Date.now() + 600_000,
      );
    });
    await makeRunDue(job, lost);
    await vi.waitFor(async () => expect((await runRow(job, lost))?.state).toBe("succeeded"), { timeout: 15_000, interval: 100 });
    expect((await runRow(job, lost))?.redispatches).toBe(1);
    expect((await hitsOf(url)).some((h) => h.headers["idempotency-key"] === lost)).toBe(true);
    await stop(job);
  });
});
