import { describe, expect, it } from "vitest";
import {
  isWorkflowRun,
  resultValue,
  SKIPPED_CONDITION,
  SKIPPED_UPSTREAM_FAILED,
  statusOfStepRun,
  stepPolicy,
  targetOfRun,
  upstreamInput,
} from "../../src/workflow/steps";

const target = (url: string) => ({ url, method: "POST" as const, headerNames: [], secrets: null });
const retry = { maxAttempts: 3, backoff: { initialMs: 1000, maxMs: 60_000, factor: 2 }, jitter: "full" as const };
const spec = {
  timeoutMs: 30_000,
  retry,
  steps: [
    { id: "a", target: target("https://a.example/") },
    { id: "b", after: ["a"], target: target("https://b.example/"), timeoutMs: 5_000, retry: { ...retry, maxAttempts: 1 } },
  ],
};

describe("workflow steps as runs", () => {
  it("a step run calls its step's target, with its own policy or the job's", () => {
    expect(targetOfRun(spec, "run_x_1.b")?.url).toBe("https://b.example/");
    expect(targetOfRun(spec, "run_x_1.gone")).toBeNull();
    expect(targetOfRun(spec, "run_x_1")).toBeNull();
    expect(isWorkflowRun(spec, "run_x_1")).toBe(true);
    expect(isWorkflowRun(spec, "run_x_1.a")).toBe(false);
    expect(isWorkflowRun({}, "run_x_1")).toBe(false);
    expect(stepPolicy(spec, "run_x_1.a")).toEqual({ timeoutMs: 30_000, retry });
    expect(stepPolicy(spec, "run_x_1.b")).toMatchObject({ timeoutMs: 5_000, retry: { maxAttempts: 1 } });
  });

  it("a step run's state is what the graph sees", () => {
    expect(statusOfStepRun({ state: "succeeded", error: null })).toEqual({ state: "succeeded" });
    for (const state of ["failed", "dead", "cancelled"]) expect(statusOfStepRun({ state, error: "x" })).toEqual({ state: "failed" });
    for (const state of ["queued", "running", "retry_wait", "waiting"])
      expect(statusOfStepRun({ state, error: null }).state).toBe("active");
    expect(statusOfStepRun({ state: "skipped", error: SKIPPED_UPSTREAM_FAILED })).toEqual({ state: "skipped", upstreamFailed: true });
    expect(statusOfStepRun({ state: "skipped", error: SKIPPED_CONDITION })).toEqual({ state: "skipped", upstreamFailed: false });
  });

  it("results go down as JSON when they parse, else as text", () => {
    expect(resultValue('{"n":1}')).toEqual({ n: 1 });
    expect(resultValue("42")).toBe(42);
    expect(resultValue("plain")).toBe("plain");
    expect(resultValue(null)).toBeNull();
    expect(
      JSON.parse(
        upstreamInput("run_x_1", Date.UTC(2026, 0, 1), [
          { stepId: "a", result: "[1,2]" },
          { stepId: "b", result: null },
        ]),
      ),
    ).toEqual({ runId: "run_x_1", scheduledAt: "2026-01-01T00:00:00.000Z", upstream: { a: [1, 2], b: null } });
  });
});
