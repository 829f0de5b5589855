import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Job } from "../../src/model/job";
import type { Run } from "../../src/model/run";
import { jitterOffset } from "../../src/schedule/jitter";
import type { Shard } from "../../src/shard/shard";
import {
  api,
  createJob,
  FAR_CRON,
  fireHeld,
  fireInFlight,
  fireNow,
  getRun,
  hitsOf,
  listRuns,
  receiverPath,
  runAlarmNow,
  shardOf,
  waitForRun,
} from "./helpers";

/** An every-1m job whose grid started two hours ago, so that it has past fires to miss. */
function everyMinuteSince2hAgo() {
  const start = Math.floor((Date.now() - 2 * 3_600_000) / 60_000) * 60_000;
  return { every: "1m", startAt: new Date(start).toISOString() };
}

/** Puts a job's next fire on its grid `minutes` minutes back, as if those fires were missed. */
async function backdateFires(job: Job, minutes: number): Promise<void> {
  const onGrid = Math.floor(Date.now() / 60_000) * 60_000 - minutes * 60_000;
  await runInDurableObject(shardOf(job), (_s: Shard, state) => {
    state.storage.sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", onGrid, job.id);
  });
}

/** Claims a job's queued run by hand so it stays unfinished (running) until the test reports. */
async function holdRunning(job: Job): Promise<Run> {
  await fireInFlight(job);
  const [run] = await listRuns(job.id);
  expect(run!.state, JSON.stringify(await listRuns(job.id))).toBe("running");
  return run!;
}

async function fireAgain(job: Job): Promise<Run[]> {
  await new Promise((r) => setTimeout(r, 5)); // a distinct instant
  await fireHeld(job);
  return listRuns(job.id);
}

describe("overlap policies (a fire while the previous run is unfinished)", () => {
  it("allow: both run", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("ov-allow") } });
    await holdRunning(job);
    const runs = await fireAgain(job);
    expect(runs.map((r) => r.state).sort()).toEqual(["running", "running"]);
  });

  it("forbid: the new fire is recorded as skipped", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("ov-forbid") }, overlap: "forbid" });
    const first = await holdRunning(job);
    const [newest] = await fireAgain(job);
    expect(newest).toMatchObject({ state: "skipped", error: `overlap forbid: run ${first.id} is still running` });
  });

  it("a policy set while a run is unfinished sees that run (it was made when nothing watched the job's open runs)", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("ov-patched") } });
    const first = await holdRunning(job);
    const res = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { overlap: "forbid" } });
    expect(res.status).toBe(200);
    const [newest] = await fireAgain(job);
    expect(newest).toMatchObject({ state: "skipped", error: `overlap forbid: run ${first.id} is still running` });
  });

  it("pausing a job whose open runs nobody watches cancels its run whose dispatch has not gone out", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("ov-pause") } });
    await holdRunning(job);
    const [queued] = await fireAgain(job); // its send refused: the dispatch waits in the shard's memory
    expect(queued!.state).toBe("running");
    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(200);
    expect(await getRun(queued!.id)).toMatchObject({ state: "cancelled", error: "job paused" });
  });

  it("buffer_one: one fire waits and starts when the previous run ends; a third is skipped", async () => {
    const url = receiverPath("ov-buffer");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, overlap: "buffer_one" });
    const first = await holdRunning(job);
    const [second] = await fireAgain(job);
    expect(second!.state).toBe("buffered");
    const [third] = await fireAgain(job);
    expect(third).toMatchObject({ state: "skipped", error: "overlap buffer_one: a fire already waits" });

    await shardOf(job).report([{ runId: first.id, fence: 1, ok: true, status: 200, error: null }]);
    await waitForRun(second!.id, ["succeeded"]);
    expect((await hitsOf(url)).map((h) => h.headers["idempotency-key"])).toEqual([second!.id]);
  });

  it("replace: the unfinished run is cancelled, its late outcome is stale, the new one runs", async () => {
    const url = receiverPath("ov-replace");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, overlap: "replace" });
    const first = await holdRunning(job);
    const runs = await fireAgain(job);
    const second = runs.find((r) => r.id !== first.id)!;
    expect(await getRun(first.id)).toMatchObject({ state: "cancelled", error: `replaced by run ${second.id}` });
    await waitForRun(second.id, ["succeeded"]);
    expect(await shardOf(job).report([{ runId: first.id, fence: 1, ok: true, status: 200, error: null }])).toEqual(["stale"]);
    const after = await getRun(first.id);
    expect(after.state).toBe("cancelled");
    expect(after.attemptLog![0]).toMatchObject({ outcome: "cancelled", late: "HTTP 200" });
  });

  it("a manual trigger obeys the policy too", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("ov-trigger") }, overlap: "forbid" });
    await holdRunning(job);
    const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ trigger: "manual", state: "skipped" });
  });
});

describe("misfire policies, after a pause", () => {
  it.each([
    ["skip", 0],
    ["fire_once", 1],
    ["catch_up", 10],
  ] as const)("%s: resuming after 10 missed fires makes %i catch-up run(s)", async (misfire, catchUps) => {
    const job = await createJob({
      schedule: everyMinuteSince2hAgo(),
      target: { url: receiverPath(`mf-${misfire}`) },
      misfire,
      catchupWindow: "1h",
    });
    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(200);
    await backdateFires(job, 10); // ten fires come and go while paused (each over a minute late by now)
    expect((await api(`/v1/jobs/${job.id}/resume`, { method: "POST" })).status).toBe(200);
    await runAlarmNow(job); // the alarm after the resume (the runtime may already have run it)
    const runs = await listRuns(job.id);
    expect(runs.filter((r) => r.catchUp)).toHaveLength(catchUps);
    // And the latest fire, within a minute of its instant, runs on time whatever the policy.
    expect(runs.filter((r) => !r.catchUp).length).toBeGreaterThanOrEqual(1);
    const resumed = (await (await api(`/v1/jobs/${job.id}`)).json()) as Job;
    expect(Date.parse(resumed.nextRunAt!)).toBeGreaterThan(Date.now() - 1_000);
  });

  it("catch_up stays inside catchupWindow", async () => {
    const job = await createJob({
      schedule: everyMinuteSince2hAgo(),
      target: { url: receiverPath("mf-window") },
      misfire: "catch_up",
      catchupWindow: "5m",
    });
    await backdateFires(job, 30);
    await runAlarmNow(job);
    const catchUps = (await listRuns(job.id)).filter((r) => r.catchUp);
    expect(catchUps.length).toBeGreaterThanOrEqual(4);
    expect(catchUps.length).toBeLessThanOrEqual(5);
    for (const r of catchUps) expect(Date.now() - Date.parse(r.scheduledAt)).toBeLessThanOrEqual(5 * 60_000 + 5_000);
  });
});

describe("jitter, bounds, completion", () => {
  it("jitter delays the fire deterministically; the run keeps its nominal instant", async () => {
    const job = await createJob({ schedule: { cron: "0 0 1 1 *" }, target: { url: receiverPath("jit") }, jitter: "30m" });
    const [held] = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT next_fire_at, next_due_at FROM jobs WHERE id = ?", job.id).toArray(),
    );
    const offset = (held!.next_due_at as number) - (held!.next_fire_at as number);
    // The offset is the job's and the instant's (jitterOffset's values are pinned in
    // test/node-unit/misfire.test.ts), so an alarm run again or a sweep holds the same due time.
    expect(offset).toBe(jitterOffset(job.id, held!.next_fire_at as number, 30 * 60_000));
    expect(offset).toBeLessThan(30 * 60_000);
    expect(job.nextRunAt).toBe(new Date(held!.next_fire_at as number).toISOString());
  });

  it("maxRuns: the job completes after that many fires", async () => {
    const job = await createJob({ schedule: { every: "1m", maxRuns: 2 }, target: { url: receiverPath("max") } });
    for (let i = 0; i < 3; i++) await fireNow(job);
    expect(await listRuns(job.id)).toHaveLength(2);
    const after = (await (await api(`/v1/jobs/${job.id}`)).json()) as Job;
    expect(after).toMatchObject({ completed: true, nextRunAt: null });
  });

  it("delay becomes the one-off instant it means", async () => {
    const before = Date.now();
    const job = await createJob({ schedule: { delay: "10m" }, target: { url: receiverPath("delay") } });
    const at = Date.parse(job.schedule.at!);
    expect(at).toBeGreaterThanOrEqual(before + 600_000);
    expect(at).toBeLessThanOrEqual(Date.now() + 600_000);
    expect(job.nextRunAt).toBe(job.schedule.at);
  });
});

describe("PATCH /v1/jobs/:id", () => {
  it("changes the definition atomically; an in-flight run finishes, later fires use the new version", async () => {
    const oldUrl = receiverPath("patch-old");
    const newUrl = receiverPath("patch-new");
    const job = await createJob({ schedule: FAR_CRON, target: { url: oldUrl } });
    const inFlight = await holdRunning(job); // dispatched under version 1
    const res = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { target: { url: newUrl }, name: "renamed" } });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ version: 2, name: "renamed", target: { url: newUrl } });

    await shardOf(job).report([{ runId: inFlight.id, fence: 1, ok: true, status: 200, error: null }]);
    expect(await getRun(inFlight.id)).toMatchObject({ state: "succeeded", jobVersion: 1 });

    await fireNow(job);
    const next = (await listRuns(job.id)).find((r) => r.id !== inFlight.id)!;
    expect(await waitForRun(next.id, ["succeeded"])).toMatchObject({ jobVersion: 2 });
    expect(await hitsOf(newUrl)).toHaveLength(1);
  });

  it("a new schedule moves the next fire; bad fields → 400; an empty patch → 400", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("patch-s") } });
    const moved = (await (await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { schedule: { every: "1h" } } })).json()) as Job;
    expect(Date.parse(moved.nextRunAt!) - Date.now()).toBeLessThanOrEqual(3_600_000);
    expect((await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { schedule: { cron: "61 * * * *" } } })).status).toBe(400);
    expect((await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: {} })).status).toBe(400);
    expect((await api(`/v1/jobs/job_0000000000000000000`, { method: "PATCH", json: { name: "x" } })).status).toBe(404);
  });
});

describe("backfill", () => {
  it("creates one run per fire in the range, and is idempotent", async () => {
    const job = await createJob({ schedule: { every: "1m", startAt: "2026-01-01T00:00:00Z" }, target: { url: receiverPath("bf") } });
    const range = { from: "2026-01-01T00:00:00Z", to: "2026-01-01T00:04:00Z" };
    const first = await api(`/v1/jobs/${job.id}/backfill`, { method: "POST", json: range });
    expect(first.status).toBe(202);
    const made = (await first.json()) as { created: string[]; existing: string[] };
    expect(made.created).toHaveLength(5);
    expect(made.existing).toEqual([]);
    const again = (await (await api(`/v1/jobs/${job.id}/backfill`, { method: "POST", json: range })).json()) as {
      created: string[];
      existing: string[];
    };
    expect(again).toEqual({ created: [], existing: made.created });
    const runs = await listRuns(job.id);
    expect(runs.filter((r) => r.trigger === "backfill")).toHaveLength(5);
  });

  it("a page of 200 runs reads back whole (more ids than one SQLite statement may bind)", async () => {
    const job = await createJob({ schedule: { every: "1m", startAt: "2026-01-01T00:00:00Z" }, target: { url: receiverPath("bf-page") } });
    const made = await api(`/v1/jobs/${job.id}/backfill`, {
      method: "POST",
      json: { from: "2026-01-01T00:00:00Z", to: "2026-01-01T02:29:00Z" },
    });
    expect(((await made.json()) as { created: string[] }).created).toHaveLength(150);
    const page = await api(`/v1/jobs/${job.id}/runs?limit=200`);
    expect(page.status, await page.clone().text()).toBe(200);
    expect(((await page.json()) as { items: unknown[] }).items).toHaveLength(150);
  });

  it("refuses an unbounded range and a reversed one", async () => {
    const job = await createJob({ schedule: { every: "1s", startAt: "2026-01-01T00:00:00Z" }, target: { url: receiverPath("bf-big") } });
    const big = await api(`/v1/jobs/${job.id}/backfill`, {
      method: "POST",
      json: { from: "2026-01-01T00:00:00Z", to: "2026-01-02T00:00:00Z" },
    });
    expect(big.status).toBe(400);
    expect(await big.json()).toMatchObject({ error: { message: expect.stringContaining("more than 1000 fires") } });
    const reversed = await api(`/v1/jobs/${job.id}/backfill`, {
      method: "POST",
      json: { from: "2026-01-02T00:00:00Z", to: "2026-01-01T00:00:00Z" },
    });
    expect(reversed.status).toBe(400);
    // It fires every second from 2026: gone before the file ends, so nothing runs during teardown.
    expect((await api(`/v1/jobs/${job.id}`, { method: "DELETE" })).status).toBe(200);
  });
});

describe("POST /v1/schedules/preview", () => {
  it("lists the next instants with the shard's own functions", async () => {
    const res = await api("/v1/schedules/preview", {
      method: "POST",
      json: { schedule: { cron: "0 9 * * MON-FRI", timezone: "Europe/Berlin" }, from: "2026-03-27T00:00:00Z", count: 3 },
    });
    expect(res.status).toBe(200);
    // Friday 27 March in winter time (08:00 UTC), then Monday 30 and Tuesday 31 in summer time (07:00 UTC).
    expect(await res.json()).toEqual({
      description: "At 09:00 AM, Monday through Friday (Europe/Berlin)",
      instants: ["2026-03-27T08:00:00.000Z", "2026-03-30T07:00:00.000Z", "2026-03-31T07:00:00.000Z"],
    });
  });

  it("invalid schedules get the same 400 as job creation", async () => {
    const res = await api("/v1/schedules/preview", { method: "POST", json: { schedule: { cron: "61 * * * *" } } });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { issues: [{ path: "schedule.cron" }] } });
    expect((await api("/v1/schedules/preview", { method: "POST", json: { schedule: { every: "1m" }, count: 101 } })).status).toBe(400);
  });
});
