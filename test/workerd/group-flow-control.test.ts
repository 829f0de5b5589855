import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Job } from "../../src/model/job";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, FAR_CRON, getRun, hitsOf, maxOverlap, receiverPath, shardOf, waitForRun } from "./helpers";

/** Every attempt of these jobs as their shards recorded them (one process, one clock): [started, finished]. */
async function attemptSpans(jobs: Job[]): Promise<Array<[number, number]>> {
  const spans = await Promise.all(
    jobs.map((job) =>
      runInDurableObject(shardOf(job), (_s: Shard, state) =>
        state.storage.sql
          .exec("SELECT a.started_at, a.finished_at FROM attempt_log a JOIN runs r ON r.id = a.run_id WHERE r.job_id = ?", job.id)
          .toArray()
          .map((r) => [r.started_at as number, r.finished_at as number] as [number, number]),
      ),
    ),
  );
  return spans.flat();
}

async function trigger(job: Job): Promise<string> {
  const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
  expect(res.status, await res.clone().text()).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

/** The default tenant's gate: the one the admin token's jobs are counted in. */
const gate = () => env.TENANT_GATE.get(env.TENANT_GATE.idFromName("default"));
const groupName = (name: string) => `${name}-${crypto.randomUUID().slice(0, 8)}`;

describe("a flow-control group", () => {
  it("holds its jobs on different shards to its parallelism; the others wait and all run", async () => {
    const key = groupName("par");
    const url = receiverPath("group-par", "delayMs=400");
    const jobs: Job[] = [];
    for (let i = 0; i < 6; i++) jobs.push(await createJob({ schedule: FAR_CRON, target: { url }, flowControl: { key, parallelism: 2 } }));
    expect(new Set(jobs.map((j) => j.shard)).size).toBeGreaterThan(1);
    expect(jobs[0]!.flowControl).toEqual({ key, parallelism: 2 });

    const ids: string[] = [];
    for (const job of jobs) ids.push(await trigger(job));
    // Woken by the gate as places free: well before the 15 s backstop re-check.
    for (const id of ids) await waitForRun(id, ["succeeded"], 12_000);
    const spans = await attemptSpans(jobs);
    expect(spans).toHaveLength(6);
    expect(maxOverlap(spans)).toBeLessThanOrEqual(2);
    expect(maxOverlap(spans)).toBe(2);
    expect(await hitsOf(url)).toHaveLength(6);
    await expect.poll(async () => (await gate().groupFigures([key]))[key]).toEqual({ inFlight: 0, waiting: 0 });
  });

  it("starts at most `rate` runs in each period", async () => {
    const key = groupName("rate");
    const url = receiverPath("group-rate");
    const jobs: Job[] = [];
    for (let i = 0; i < 6; i++)
      jobs.push(await createJob({ schedule: FAR_CRON, target: { url }, flowControl: { key, rate: 2, period: "1s" } }));
    const ids: string[] = [];
    for (const job of jobs) ids.push(await trigger(job));
    for (const id of ids) await waitForRun(id, ["succeeded"], 12_000);
    const starts = (await attemptSpans(jobs)).map(([a]) => a).sort((a, b) => a - b);
    expect(starts).toHaveLength(6);
    // Two per one-second window, windows from the epoch, counted by the gate when it grants. A
    // start is recorded when the shard's change commits, after the grant and at most RECORDED
    // later (a loaded machine's await), so only a start that far into its window is surely in
    // that window's count. Six grants cover three windows: the first and the sixth are over a
    // second apart, their records at least a second less RECORDED.
    const RECORDED = 250;
    const sure = starts.filter((t) => t % 1000 >= RECORDED);
    const windows = Map.groupBy(sure, (t) => Math.floor(t / 1000));
    expect(Math.max(...[...windows.values()].map((w) => w.length))).toBeLessThanOrEqual(2);
    expect(starts.at(-1)! - starts[0]!).toBeGreaterThan(1_000 - RECORDED);
  });

  it("gives a run's place back when its attempt fails, for a retry or for good, and takes it again for the retry", async () => {
    const key = groupName("fail");
    const flaky = receiverPath("group-flaky", "status=500,200&delayMs=300");
    const broken = receiverPath("group-broken", "status=500&delayMs=300");
    const fine = receiverPath("group-fine", "delayMs=300");
    const retry = { maxAttempts: 2, backoff: { initialMs: 100, maxMs: 100, factor: 1 }, jitter: "none" };
    const flowControl = { key, parallelism: 1 };
    const a = await createJob({ schedule: FAR_CRON, target: { url: flaky }, retry, flowControl });
    const b = await createJob({ schedule: FAR_CRON, target: { url: broken }, retry: { ...retry, maxAttempts: 1 }, flowControl });
    const c = await createJob({ schedule: FAR_CRON, target: { url: fine }, flowControl });
    const ids = [await trigger(a), await trigger(b), await trigger(c)];
    await waitForRun(ids[0]!, ["succeeded"], 12_000);
    await waitForRun(ids[1]!, ["dead"], 12_000);
    await waitForRun(ids[2]!, ["succeeded"], 12_000);
    const spans = await attemptSpans([a, b, c]);
    expect(spans).toHaveLength(4);
    expect(maxOverlap(spans)).toBe(1);
    await expect.poll(async () => (await gate().groupFigures([key]))[key]).toEqual({ inFlight: 0, waiting: 0 });
  });

  it("a job without a group is not held back by a full one", async () => {
    const key = groupName("full");
    const slow = await createJob({
      schedule: FAR_CRON,
      target: { url: receiverPath("group-slow", "delayMs=1500") },
      flowControl: { key, parallelism: 1 },
    });
    const free = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("group-free") } });
    const first = await trigger(slow);
    const held = (await (await api(`/v1/jobs/${slow.id}/trigger`, { method: "POST" })).json()) as { id: string; state: string };
    expect(held.state).toBe("waiting");
    const other = (await (await api(`/v1/jobs/${free.id}/trigger`, { method: "POST" })).json()) as { id: string; state: string };
    expect(other.state).toBe("running");
    for (const id of [first, held.id, other.id]) await waitForRun(id, ["succeeded"], 12_000);
  });

  it("is set, changed and cleared by PATCH", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("group-patch") } });
    const set = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { flowControl: { key: "k", rate: 5, period: "1m" } } });
    expect(set.status, await set.clone().text()).toBe(200);
    expect(((await set.json()) as Job).flowControl).toEqual({ key: "k", rate: 5, period: "1m" });
    const cleared = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { flowControl: null } });
    expect(((await cleared.json()) as Job).flowControl).toBeUndefined();
  });

  it.each([
    [{ key: "k" }, "flowControl", "give parallelism or rate"],
    [{ key: "", parallelism: 1 }, "flowControl.key", ""],
    [{ key: "k", parallelism: 0 }, "flowControl.parallelism", ""],
    [{ key: "k", rate: 2, period: "2w" }, "flowControl.period", "unit"],
    [{ key: "k", parallelism: 2, period: "1s" }, "flowControl.period", "only with rate"],
    [{ key: "k", parallelism: 2, burst: 3 }, "flowControl", ""],
  ])("refuses %j with a 400 naming %s, and creates nothing", async (flowControl, field, why) => {
    const url = receiverPath("group-bad");
    const res = await api("/v1/jobs", { method: "POST", json: { schedule: FAR_CRON, target: { url }, flowControl } });
    expect(res.status).toBe(400);
    const text = await res.text();
    expect(text).toContain(field);
    expect(text).toContain(why);
  });
});

/** When the group's permit of the run lapses at the gate (undefined: none held). */
async function groupPermitExpiry(runId: string): Promise<number | undefined> {
  return runInDurableObject(
    gate(),
    (_g, state) =>
      state.storage.sql.exec("SELECT expires_at FROM group_permits WHERE permit LIKE ?", `${runId}#%`).toArray()[0]?.expires_at as
        | number
        | undefined,
  );
}

describe("a flow-control group's permits", () => {
  it("are renewed while a long-running attempt heartbeats, and a lapsed one hands its place on", async () => {
    const key = groupName("lease");
    const url = receiverPath("group-202", "status=202");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, timeoutMs: 5_000, flowControl: { key, parallelism: 1 } });
    const first = await trigger(job);
    await expect.poll(async () => (await getRun(first)).attemptLog?.[0]?.outcome).toBe("accepted");
    const token = (await hitsOf(url))[0]!.headers["x-edgecron-completion-token"]!;
    const beat = await api(`/v1/runs/${first}/heartbeat`, { method: "POST", json: { token, extendMs: 3_600_000 } });
    expect(beat.status, await beat.clone().text()).toBe(200);
    await expect.poll(() => groupPermitExpiry(first)).toBeGreaterThan(Date.now() + 3_500_000);
    const second = await trigger(job);
    expect((await getRun(second)).state).toBe("waiting");

    // The first run's shard is gone for good, say: its permit's lease runs out, and the gate's
    // alarm hands the place to the shard waiting for it.
    await runInDurableObject(gate(), async (_g, state) => {
      state.storage.sql.exec("UPDATE group_permits SET expires_at = ? WHERE permit LIKE ?", Date.now() - 1, `${first}#%`);
      await state.storage.setAlarm(Date.now() + 3_600_000); // for runDurableObjectAlarm to run it now
    });
    await runDurableObjectAlarm(gate());
    await waitForRun(second, ["running", "succeeded"], 5_000);
    expect(await api(`/v1/runs/${first}/complete`, { method: "POST", json: { token, ok: true } }).then((r) => r.status)).toBe(200);
  });
});
