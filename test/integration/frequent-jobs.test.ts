import { env, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { armFault, disarmFaults, faultCounts } from "../../src/faults";
import { scheduledRunId } from "../../src/model/ids";
import type { Job } from "../../src/model/job";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, hitsOf, receiverPath, rereadFrequentJobs, shardOf } from "./helpers";

/**
 * Frequent jobs (src/shard/frequent-jobs.ts): a job due again within a claim timeout keeps its
 * next due time out of every index, and its own fires look at its runs' claim deadlines, which
 * are not in `runs_due`. What must hold: a dispatch lost for such a run is sent again by a
 * later fire; a job that stops being frequent (a pause, a slower schedule) gives its runs their
 * claim deadline back, so none is left unwatched.
 */

const CLAIM_TIMEOUT_MS = 60_000; // wrangler.toml

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

/**
 * A run of the job fired at `at`, dispatched, its claim deadline left to the job's fires (no
 * due_at), as one whose dispatch was lost: written straight into storage (`state` queued, or
 * running under a lease), with the job's watermark moved back to it.
 */
async function runAwaitingDeadline(job: Job, at: number, state: "queued" | "running"): Promise<string> {
  const runId = scheduledRunId(job.id, at);
  await runInDurableObject(shardOf(job), (_s: Shard, st) => {
    st.storage.sql.exec(
      `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at, lease_until, watched,
         a_number, a_fence, a_started_at, a_outcome, a_token)
       VALUES (?1, ?2, 1, 'schedule', ?3, ?4, 1, 1, NULL, ?3, ?5, ?6, 0, ?7, ?7, ?5, ?8, ?9)`,
      runId,
      job.id,
      at,
      state,
      state === "running" ? at : null,
      state === "running" ? Date.now() + 600_000 : null,
      state === "running" ? 1 : null,
      state === "running" ? "running" : null,
      state === "running" ? "token" : null,
    );
    st.storage.sql.exec("UPDATE jobs SET deadlines_from = MIN(COALESCE(deadlines_from, ?1), ?1) WHERE id = ?2", at, job.id);
  });
  await rereadFrequentJobs(shardOf(job));
  return runId;
}

/**
 * Runs of the shard dispatched or running that nobody would look at again: no due time of their
 * own, in no claim chunk, and not in the range of runs their frequent job's fires look at. A run
 * a lost dispatch left there would never run: this must always be empty.
 */
async function unwatchedRuns(shard: DurableObjectStub<Shard>): Promise<{ unwatched: Row[]; open: number }> {
  return runInDurableObject(shard, (_s: Shard, state) => {
    const sql = state.storage.sql;
    const chunked = new Set(
      sql
        .exec("SELECT runs FROM claim_chunks")
        .toArray()
        .flatMap((r) => JSON.parse(r.runs as string) as string[]),
    );
    const open = sql
      .exec(
        `SELECT r.id, r.state, r.trigger, r.scheduled_at, r.due_at, j.frequent, j.deadlines_from FROM runs r JOIN jobs j ON j.id = r.job_id
         WHERE r.state IN ('queued', 'running')`,
      )
      .toArray();
    const watchedByJob = (r: Row) =>
      r.frequent === 1 && r.trigger === "schedule" && r.deadlines_from !== null && Number(r.deadlines_from) <= Number(r.scheduled_at);
    return { unwatched: open.filter((r) => r.due_at === null && !chunked.has(r.id as string) && !watchedByJob(r)), open: open.length };
  });
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

  it("a dispatch lost a claim timeout ago is sent again by the job's next fire, and its run succeeds", async () => {
    const { job, url } = await frequentJob("freq-lost");
    const lost = await runAwaitingDeadline(job, Date.now() - CLAIM_TIMEOUT_MS - 1_000, "queued");
    await vi.waitFor(async () => expect((await runRow(job, lost))?.state).toBe("succeeded"), { timeout: 15_000, interval: 100 });
    expect((await runRow(job, lost))?.redispatches).toBe(1);
    expect((await hitsOf(url)).some((h) => h.headers["idempotency-key"] === lost)).toBe(true);
    await stop(job);
  });

  it("a run fired less than a claim timeout ago is left alone: its dispatch may still be on its way", async () => {
    const { job } = await frequentJob("freq-young");
    const young = await runAwaitingDeadline(job, Date.now() - CLAIM_TIMEOUT_MS + 20_000, "queued");
    const fires = Number((await jobRow(job)).fires);
    await vi.waitFor(async () => expect(Number((await jobRow(job)).fires)).toBeGreaterThanOrEqual(fires + 2), { timeout: 15_000 });
    const run = await runRow(job, young);
    expect(run?.state).toBe("queued");
    expect(run?.redispatches).toBe(0);
    // The watermark stays at or before it, so a later fire still looks at it.
    expect(Number((await jobRow(job)).deadlines_from)).toBeLessThanOrEqual(Number(run?.scheduled_at));
    await stop(job);
  });

  it("a pause cancels its dispatched runs and gives its running ones their claim deadline in runs_due", async () => {
    const { job } = await frequentJob("freq-pause");
    const at = Date.now() - 10_000;
    const queued = await runAwaitingDeadline(job, at, "queued");
    const running = await runAwaitingDeadline(job, at + 1, "running");
    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(200);
    expect((await runRow(job, queued))?.state).toBe("cancelled");
    const held = await runRow(job, running);
    expect(held?.state).toBe("running");
    expect(held?.due_at).toBe(at + 1 + CLAIM_TIMEOUT_MS);
    const row = await jobRow(job);
    expect(row.frequent).toBe(0);
    expect(row.soon_at).toBeNull();
    await stop(job);
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

  it("a schedule slowed past the claim timeout gives its runs their claim deadline back, and the job fires by jobs_next_due", async () => {
    const { job } = await frequentJob("freq-slow");
    const at = Date.now() - 5_000;
    const queued = await runAwaitingDeadline(job, at, "queued");
    const res = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { schedule: { every: "1h" } } });
    expect(res.status, await res.clone().text()).toBe(200);
    await vi.waitFor(async () => expect((await runRow(job, queued))?.due_at).toBe(at + CLAIM_TIMEOUT_MS), { timeout: 10_000 });
    const row = await jobRow(job);
    expect(row.frequent).toBe(0);
    expect(row.next_due_at).toBe(row.next_fire_at);
    await stop(job);
  });
});
