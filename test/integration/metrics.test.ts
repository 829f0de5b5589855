import { describe, expect, it } from "vitest";
import { percentile } from "../../src/app/metrics";
import { api, createJob, FAR_CRON, fireNow, listRuns, receiverPath, waitForRun } from "./helpers";

describe("GET /v1/metrics", () => {
  it("reports runs by state, fire lag, backlog and failure rate across shards", async () => {
    const ok = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("m-ok") } });
    const bad = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("m-bad", "status=400") } });
    for (const job of [ok, bad]) await fireNow(job);
    await waitForRun((await listRuns(ok.id))[0]!.id, ["succeeded"]);
    await waitForRun((await listRuns(bad.id))[0]!.id, ["failed"]);

    const res = await api("/v1/metrics?window=1h");
    expect(res.status).toBe(200);
    const m = (await res.json()) as Record<string, any>;
    expect(m.windowMs).toBe(3_600_000);
    expect(m.runsByState).toEqual({ succeeded: 1, failed: 1 });
    expect(m.attempts.byOutcome).toEqual({ succeeded: 1, failed: 1 });
    expect(m.attempts.failureRate).toBe(0.5);
    expect(m.fireLagMs.count).toBe(2);
    expect(m.fireLagMs.p50).toBeGreaterThanOrEqual(0);
    expect(m.fireLagMs.max).toBeGreaterThanOrEqual(m.fireLagMs.p50);
    expect(m).toMatchObject({ outbox: 0, awaitingClaim: 0, oldestAwaitingClaimMs: null });
  });

  it.each(["abc", "2d", "0s"])("window=%s → 400", async (window) => {
    const res = await api(`/v1/metrics?window=${window}`);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { issues: [{ path: "window" }] } });
  });

  it("nearest-rank percentiles", () => {
    expect(percentile([], 50)).toBeNull();
    expect(percentile([5], 99)).toBe(5);
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(xs, 50)).toBe(50);
    expect(percentile(xs, 90)).toBe(90);
    expect(percentile(xs, 99)).toBe(99);
  });
});
