import { describe, expect, it } from "vitest";
import { type ExplainFacts, explainFire } from "../../src/schedule/explain";

const HOUR = 3_600_000;
const T0 = Date.parse("2026-06-01T00:00:00Z");

const facts = (over: Partial<ExplainFacts> = {}): ExplainFacts => ({
  jobId: "job_0mihx2k3f8a1b2c3d4e5",
  spec: { schedule: { cron: "0 * * * *" }, misfire: "fire_once", catchupWindow: "1h", overlap: "allow" },
  createdAt: T0,
  paused: false,
  deleted: false,
  tenantLimited: false,
  nextRunAt: null,
  completed: false,
  unfinished: [],
  breaker: null,
  ...over,
});
const runId = (t: number) => `run_x_${t}`;
const verdicts = (e: ReturnType<typeof explainFire>) => Object.fromEntries(e.decisions.map((d) => [d.step, d.verdict]));

describe("explainFire", () => {
  it("a past fire with no run while the job is paused: missed, and the misfire policy says what happens", () => {
    const e = explainFire(facts({ paused: true }), T0 + 2 * HOUR, T0 + 5 * HOUR, runId, null);
    expect(e.fire?.scheduledAt).toBe(T0 + 2 * HOUR);
    expect(verdicts(e)).toMatchObject({ paused: "stops", misfire: "stops", run: "stops" });
    expect(e.decisions.find((d) => d.step === "misfire")?.detail).toContain("fire_once");
  });

  it("a catch-up run says so", () => {
    const e = explainFire(facts(), T0 + HOUR, T0 + 3 * HOUR, runId, { state: "succeeded", error: null, catchUp: true });
    expect(e.decisions.find((d) => d.step === "misfire")?.detail).toContain("catch-up");
    expect(verdicts(e).run).toBe("ok");
  });

  it("a future fire meeting an unfinished run under forbid may be skipped; under allow it goes on", () => {
    const unfinished = [{ id: "run_a", state: "running" as const }];
    const forbid = explainFire(facts({ spec: { ...facts().spec, overlap: "forbid" }, unfinished }), T0 + HOUR, T0, runId, null);
    expect(forbid.decisions.find((d) => d.step === "overlap")).toMatchObject({
      verdict: "may_stop",
      detail: expect.stringContaining("skipped"),
    });
    expect(verdicts(explainFire(facts({ unfinished }), T0 + HOUR, T0, runId, null)).overlap).toBe("ok");
  });

  it("flow control is named when the job or its tenant limits runs", () => {
    const e = explainFire(facts({ spec: { ...facts().spec, maxConcurrency: 2 }, tenantLimited: true }), T0 + HOUR, T0, runId, null);
    expect(e.decisions.find((d) => d.step === "flow_control")?.detail).toMatch(/maxConcurrency 2.*tenant/);
  });

  it("an open breaker for the target's origin is named, with when it lets a probe go", () => {
    const breaker = { origin: "https://api.example.com", state: "open", retryAt: T0 + 2 * HOUR };
    const e = explainFire(facts({ breaker }), T0 + HOUR, T0, runId, null);
    expect(e.decisions.find((d) => d.step === "breaker")).toMatchObject({
      verdict: "may_wait",
      detail: expect.stringContaining("https://api.example.com is open: runs for it wait until 2026-06-01T02:00:00.000Z"),
    });
  });

  it("past endAt there is no fire", () => {
    const e = explainFire(
      facts({ spec: { ...facts().spec, schedule: { cron: "0 * * * *", endAt: "2026-06-01T03:00:00.000Z" } } }),
      T0 + 4 * HOUR,
      T0,
      runId,
      null,
    );
    expect(e.fire).toBeNull();
    expect(e.decisions[0]?.detail).toContain("ends at 2026-06-01T03:00:00.000Z");
  });
});
