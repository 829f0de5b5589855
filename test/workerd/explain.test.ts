import { describe, expect, it, vi } from "vitest";
import { api, createJob, FAR_CRON, listRuns, receiverPath } from "./helpers";

interface Decision {
  step: string;
  verdict: string;
  detail: string;
}
interface Explanation {
  fire: { scheduledAt: string; dueAt: string } | null;
  runId: string | null;
  run: { id: string; state: string } | null;
  decisions: Decision[];
}

async function explain(jobId: string, at?: string): Promise<Explanation> {
  const res = await api(`/v1/jobs/${jobId}/explain${at ? `?at=${encodeURIComponent(at)}` : ""}`);
  expect(res.status, await res.clone().text()).toBe(200);
  return res.json();
}

const step = (e: Explanation, name: string) => e.decisions.find((d) => d.step === name);

describe("GET /v1/jobs/:id/explain", () => {
  it("a future fire: the next match, not due yet, with its jitter", async () => {
    const job = await createJob({ schedule: { cron: "0 3 * * *" }, target: { url: receiverPath("explain") }, jitter: "30s" });
    const e = await explain(job.id);
    // The same instant the shard holds as the job's next fire.
    expect(e.fire?.scheduledAt).toBe(job.nextRunAt);
    expect(new Date(e.fire!.scheduledAt).getUTCHours()).toBe(3);
    const offset = Date.parse(e.fire!.dueAt) - Date.parse(e.fire!.scheduledAt);
    expect(offset).toBeGreaterThanOrEqual(0);
    expect(offset).toBeLessThan(30_000);
    expect(step(e, "schedule")).toMatchObject({ verdict: "ok" });
    expect(step(e, "jitter")?.detail).toContain(`${offset} ms`);
    expect(step(e, "run")).toMatchObject({ verdict: "ok", detail: expect.stringContaining("not due yet") });
    expect(e.run).toBeNull();
  });

  it("a paused job: its next fire runs only if resumed first", async () => {
    const job = await createJob({ schedule: { cron: "0 3 * * *" }, target: { url: receiverPath("explain") } });
    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(200);
    const e = await explain(job.id);
    expect(step(e, "paused")).toMatchObject({ verdict: "may_stop", detail: expect.stringContaining("paused") });
  });

  it("a DST gap: 02:30 Berlin on the night the clock springs forward fires at 03:00 local, and says why", async () => {
    const job = await createJob({
      schedule: { cron: "30 2 * * *", timezone: "Europe/Berlin" },
      target: { url: receiverPath("explain") },
    });
    const e = await explain(job.id, "2027-03-28T00:00:00Z");
    expect(e.fire?.scheduledAt).toBe("2027-03-28T01:00:00.000Z"); // 03:00 CEST, the end of the gap
    expect(step(e, "schedule")?.detail).toMatch(/springs forward.*skips fires when the gap ends/);
    // The day before, an ordinary night: no DST words.
    const before = await explain(job.id, "2027-03-20T00:00:00Z");
    expect(before.fire?.scheduledAt).toBe("2027-03-20T01:30:00.000Z");
    expect(step(before, "schedule")?.detail).not.toContain("springs forward");
  });

  it("a fire skipped by overlap forbid says which run it met", async () => {
    // Every second, each call taking 2.5 s: with forbid, fires meet a running run and are skipped.
    const job = await createJob({
      schedule: { cron: "* * * * * *" },
      target: { url: receiverPath("explain", "delayMs=2500") },
      overlap: "forbid",
    });
    try {
      const skipped = await vi.waitFor(
        async () => {
          const run = (await listRuns(job.id)).find((r) => r.state === "skipped");
          if (!run) throw new Error("no skipped fire yet");
          return run;
        },
        { timeout: 15_000, interval: 200 },
      );
      const e = await explain(job.id, skipped.scheduledAt);
      expect(e.fire?.scheduledAt).toBe(skipped.scheduledAt);
      expect(e.runId).toBe(skipped.id);
      expect(e.run).toMatchObject({ id: skipped.id, state: "skipped" });
      expect(step(e, "overlap")).toMatchObject({ verdict: "stops", detail: expect.stringMatching(/overlap forbid: run run_\S+ is still/) });
    } finally {
      await api(`/v1/jobs/${job.id}`, { method: "DELETE" });
    }
  });

  it("a one-off fire before the instant asked: no fire", async () => {
    const job = await createJob({ schedule: { at: "2030-01-01T00:00:00Z" }, target: { url: receiverPath("explain") } });
    const e = await explain(job.id, "2030-01-02T00:00:00Z");
    expect(e.fire).toBeNull();
    expect(e.decisions).toEqual([{ step: "schedule", verdict: "stops", detail: expect.stringContaining("before") }]);
  });

  it("a bad instant is a 400 naming `at`; an unknown job a 404", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("explain") } });
    const bad = await api(`/v1/jobs/${job.id}/explain?at=yesterday`);
    expect(bad.status).toBe(400);
    const body = (await bad.json()) as { error: { issues: Array<{ path: string }> } };
    expect(body.error.issues.length).toBeGreaterThan(0);
    expect(body.error.issues.every((i) => i.path === "at")).toBe(true);
    expect((await api("/v1/jobs/job_0000000000000000000/explain")).status).toBe(404);
  });
});
