import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import type { Job } from "../../src/model/job";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, FAR_CRON, fireNow, listRuns, receiverPath, shardOf } from "./helpers";

/** A job that fires only when the test says so, one attempt per run, answered in turn by `statuses`. */
async function jobAnswering(statuses: string, extra: Record<string, unknown> = {}): Promise<Job> {
  return createJob({
    schedule: FAR_CRON,
    target: { url: receiverPath("auto-pause", `status=${statuses}`) },
    retry: { maxAttempts: 1 },
    ...extra,
  });
}

async function getJob(id: string): Promise<Job> {
  const res = await api(`/v1/jobs/${id}`);
  expect(res.status).toBe(200);
  return res.json();
}

/** Fires the job once and waits for that run to end, whatever its state. */
async function runOnce(job: Job): Promise<string> {
  const due = await fireNow(job);
  const run = await vi.waitFor(
    async () => {
      const found = (await listRuns(job.id)).find((r) => Date.parse(r.scheduledAt) === due);
      if (!found || !["succeeded", "dead", "failed"].includes(found.state)) throw new Error(`run at ${due}: ${found?.state ?? "none yet"}`);
      return found;
    },
    { timeout: 15_000, interval: 50 },
  );
  return run.state;
}

const streakOf = (job: Job) =>
  runInDurableObject(
    shardOf(job),
    (_s: Shard, state) => state.storage.sql.exec("SELECT failure_streak AS n FROM jobs WHERE id = ?", job.id).one().n as number,
  );

describe("pauseAfterFailures", () => {
  it("pauses the job after N runs in a row failed, says why, and resume clears it and starts the count again", async () => {
    const job = await jobAnswering("500", { pauseAfterFailures: 2 });
    expect(job).toMatchObject({ pauseAfterFailures: 2, paused: false, pausedReason: null });

    expect(await runOnce(job)).toBe("dead");
    expect((await getJob(job.id)).paused).toBe(false);
    expect(await runOnce(job)).toBe("dead");
    const paused = await vi.waitFor(
      async () => {
        const j = await getJob(job.id);
        if (!j.paused) throw new Error("not paused yet");
        return j;
      },
      { timeout: 5_000, interval: 50 },
    );
    expect(paused.pausedReason).toMatch(/after 2 runs in a row ended dead or failed.*ended dead: HTTP 500/);
    expect(paused.version).toBe(job.version + 1);
    expect(paused.nextRunAt).toBeNull();

    const resumed = await api(`/v1/jobs/${job.id}/resume`, { method: "POST" });
    expect(resumed.status).toBe(200);
    expect(await resumed.json()).toMatchObject({ paused: false, pausedReason: null });
    expect(await streakOf(job)).toBe(0);
    // One more failure after the resume is a streak of 1, not 3.
    expect(await runOnce({ ...job, version: paused.version + 1 })).toBe("dead");
    expect(await streakOf(job)).toBe(1);
    expect((await getJob(job.id)).paused).toBe(false);
  });

  it("a success in between starts the count again", async () => {
    const job = await jobAnswering("500,200,500", { pauseAfterFailures: 2 });
    expect(await runOnce(job)).toBe("dead");
    expect(await runOnce(job)).toBe("succeeded");
    expect(await streakOf(job)).toBe(0);
    expect(await runOnce(job)).toBe("dead");
    expect(await streakOf(job)).toBe(1);
    expect((await getJob(job.id)).paused).toBe(false);
  });

  it("a person's pause stands as it is: no reason is added to it", async () => {
    const job = await jobAnswering("500", { pauseAfterFailures: 5 });
    const res = await api(`/v1/jobs/${job.id}/pause`, { method: "POST" });
    expect(await res.json()).toMatchObject({ paused: true, pausedReason: null });
  });

  it("a job without the setting keeps no count", async () => {
    const job = await jobAnswering("500");
    expect(await runOnce(job)).toBe("dead");
    expect(await streakOf(job)).toBe(0);
  });

  it("PATCH sets and clears it; a bad value is a 400 naming the field", async () => {
    const job = await jobAnswering("200");
    const set = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { pauseAfterFailures: 3 } });
    expect(await set.json()).toMatchObject({ pauseAfterFailures: 3 });
    const cleared = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { pauseAfterFailures: null } });
    expect(await cleared.json()).not.toHaveProperty("pauseAfterFailures");
    for (const bad of [0, 1.5, "3", 1_001]) {
      const res = await api("/v1/jobs", {
        method: "POST",
        json: { schedule: FAR_CRON, target: { url: receiverPath("x") }, pauseAfterFailures: bad },
      });
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ error: { issues: [{ path: "pauseAfterFailures" }] } });
    }
  });
});
