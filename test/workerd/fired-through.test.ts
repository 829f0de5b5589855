import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { scheduledRunId } from "../../src/model/ids";
import type { JobDefinition } from "../../src/protocol/stored-rows";
import type { Shard } from "../../src/shard/shard";
import { definition, receiverPath, specLike } from "./helpers";

/**
 * The alarm's position in jobs_next_due (src/shard/fired-through.ts): a one-off job's fire
 * leaves the job's row as it was, and the position says it fired. What must hold: such a job
 * reads as completed; a shard that lost the position fires nothing twice; a change to a fired
 * job does not fire it again, even once its run is gone; a job paused while the alarm passed
 * its due time fires when it resumes; the retention pass writes the position.
 */

type Row = Record<string, SqlStorageValue>;

const rows = (shard: DurableObjectStub<Shard>, query: string, ...bindings: SqlStorageValue[]) =>
  runInDurableObject(shard, (_s: Shard, state) => state.storage.sql.exec(query, ...bindings).toArray() as Row[]);

const storedPosition = async (shard: DurableObjectStub<Shard>) =>
  (await rows(shard, "SELECT value FROM meta WHERE key = 'fired_through'"))[0]?.value ?? null;

/** One-off jobs due at `at` (+ `offsets[i]` ms), applied to the shard, and the runs their fires make. */
async function oneOffJobs(shard: DurableObjectStub<Shard>, name: string, at: number, offsets: number[]) {
  const jobs: JobDefinition[] = [];
  for (const offset of offsets) {
    const spec = await specLike({ at: new Date(at + offset).toISOString() }, receiverPath(name));
    jobs.push(definition(spec, Date.now()));
  }
  await shard.applyJobs(jobs);
  return { jobs, runIds: jobs.map((j, i) => scheduledRunId(j.id, at + offsets[i]!)) };
}

/** Waits until `at`, then runs the alarm (the runtime's own may have come first). */
async function fireAt(shard: DurableObjectStub<Shard>, at: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now())));
  await runDurableObjectAlarm(shard);
}

async function statesOf(shard: DurableObjectStub<Shard>): Promise<Record<string, string>> {
  const runs = await rows(shard, "SELECT id, state FROM runs");
  return Object.fromEntries(runs.map((r) => [r.id as string, r.state as string]));
}

async function untilSucceeded(shard: DurableObjectStub<Shard>, runIds: string[]): Promise<void> {
  await vi.waitFor(async () => expect(await statesOf(shard)).toEqual(Object.fromEntries(runIds.map((id) => [id, "succeeded"]))), {
    timeout: 20_000,
    interval: 100,
  });
}

/** `count` one-off jobs due in a second on a shard of the test's own, fired, their runs succeeded. */
async function firedOneOffs(shardName: string, name: string, count: number) {
  const shard = env.SHARD.get(env.SHARD.idFromName(shardName));
  const at = Date.now() + 1_000;
  const made = await oneOffJobs(shard, name, at, Array(count).fill(0));
  await fireAt(shard, at);
  await untilSucceeded(shard, made.runIds);
  return { shard, at, ...made };
}

/**
 * The shard of a fired job loses its memory (the position with it: the alarm will read the job
 * again); the job is paused, its run leaves as retention takes it days later, the job resumes,
 * and the alarm runs. The job's runtimes after the pause and after the resume.
 */
async function pauseAfterRestartThenResume(shard: DurableObjectStub<Shard>, job: JobDefinition) {
  await evictDurableObject(shard);
  const [paused] = await shard.applyJobs([{ ...job, version: 2, paused: true }]);
  await rows(shard, "DELETE FROM runs");
  const [resumed] = await shard.applyJobs([{ ...job, version: 3, paused: false }]);
  await runDurableObjectAlarm(shard);
  return { paused, resumed };
}

describe("the alarm's position in jobs_next_due", () => {
  it("a one-off job's fire leaves its row as it was, and the job reads as completed", async () => {
    const { shard, at, jobs } = await firedOneOffs("shard-900301", "fired-kept", 2);

    const held = await rows(shard, "SELECT next_fire_at, next_due_at, fires FROM jobs ORDER BY id");
    expect(held).toEqual([
      { next_fire_at: at, next_due_at: at, fires: 0 },
      { next_fire_at: at, next_due_at: at, fires: 0 },
    ]);
    const runtimes = await shard.jobRuntimes(jobs.map((j) => j.id));
    expect(runtimes.map((r) => ({ nextRunAt: r.nextRunAt, completed: r.completed }))).toEqual([
      { nextRunAt: null, completed: true },
      { nextRunAt: null, completed: true },
    ]);
    // Nothing is left for the alarm to fire: it waits for the runs' claim deadline, not for these jobs.
    expect(await runInDurableObject(shard, (_s: Shard, state) => state.storage.getAlarm())).toBeGreaterThan(Date.now() + 30_000);
  });

  it("a shard that lost its memory before writing the position reads its fired jobs again and fires nothing twice", async () => {
    const { shard, jobs, runIds } = await firedOneOffs("shard-900302", "fired-lost", 3);
    expect(await storedPosition(shard)).toBeNull(); // written every 1,000 jobs or at a retention pass

    await evictDurableObject(shard);
    expect((await shard.jobRuntimes(jobs.map((j) => j.id))).map((r) => r.completed)).toEqual([false, false, false]);
    await runDurableObjectAlarm(shard); // reads the three jobs again: their runs exist
    expect(Object.keys(await statesOf(shard)).sort()).toEqual([...runIds].sort());
    expect((await shard.jobRuntimes(jobs.map((j) => j.id))).map((r) => r.completed)).toEqual([true, true, true]);
  });

  it("a change to a fired one-off job does not fire it again, even once its run has left the shard", async () => {
    const { shard, jobs } = await firedOneOffs("shard-900303", "fired-changed", 1);

    // The run leaves as retention would take it; then the job's target changes.
    await rows(shard, "DELETE FROM runs");
    const job = jobs[0]!;
    const changed = { ...job, version: 2, spec: { ...job.spec, timeoutMs: 20_000 } };
    const [runtime] = await shard.applyJobs([changed]);
    expect(runtime).toMatchObject({ nextRunAt: null, completed: true });
    await runDurableObjectAlarm(shard);
    expect(await rows(shard, "SELECT id FROM runs")).toEqual([]);
  });

  it("a pause that comes after a restart, before the alarm read the fired job again, still finds it fired", async () => {
    const { shard, jobs } = await firedOneOffs("shard-900306", "fired-paused-restart", 1);

    const { paused, resumed } = await pauseAfterRestartThenResume(shard, jobs[0]!);
    expect(paused).toMatchObject({ completed: true });
    expect(resumed).toMatchObject({ nextRunAt: null, completed: true });
    expect(await rows(shard, "SELECT id FROM runs")).toEqual([]);
  });

  it("the same holds for the last fire of a schedule with an end", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900307"));
    const at = Date.now() + 1_000;
    const instant = new Date(at).toISOString();
    const spec = await specLike({ every: "1h", startAt: instant, endAt: new Date(at + 1_000).toISOString() }, receiverPath("fired-last"));
    const job = definition(spec, Date.now());
    await shard.applyJobs([job]);
    await fireAt(shard, at);
    await untilSucceeded(shard, [scheduledRunId(job.id, at)]);
    expect(await rows(shard, "SELECT next_fire_at, fires FROM jobs")).toEqual([{ next_fire_at: at, fires: 0 }]); // kept

    const { resumed } = await pauseAfterRestartThenResume(shard, job);
    expect(resumed).toMatchObject({ nextRunAt: null, completed: true });
    expect(await rows(shard, "SELECT id FROM runs")).toEqual([]);
  });

  it("a job paused while the alarm passed its due time fires when it resumes", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900304"));
    const at = Date.now() + 1_500;
    // The paused job is due before the other, which the alarm fires: the position passes it.
    const { jobs, runIds } = await oneOffJobs(shard, "fired-resumed", at, [-500, 0]);
    const paused = jobs[0]!;
    await shard.applyJobs([{ ...paused, version: 2, paused: true }]);
    await fireAt(shard, at);
    await untilSucceeded(shard, [runIds[1]!]);

    const [runtime] = await shard.applyJobs([{ ...paused, version: 3, paused: false }]);
    expect(runtime).toMatchObject({ completed: false });
    await runDurableObjectAlarm(shard);
    await untilSucceeded(shard, runIds); // its fire was missed while paused: the misfire policy (fire_once) fires it
  });

  it("the retention pass writes the position", async () => {
    const { shard, at, jobs } = await firedOneOffs("shard-900305", "fired-written", 1);
    expect(await storedPosition(shard)).toBeNull();

    await rows(shard, "UPDATE meta SET value = ? WHERE key = 'retention_next_at'", String(Date.now() - 1));
    await runDurableObjectAlarm(shard);
    expect(JSON.parse((await storedPosition(shard)) as string)).toEqual({ fired: { dueAt: at, jobId: jobs[0]!.id } });
  });
});
