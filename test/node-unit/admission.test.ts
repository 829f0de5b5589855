import { describe, expect, it } from "vitest";
import type { RunRow } from "../../src/protocol/stored-rows";
import { planAdmission } from "../../src/shard/admission";
import type { ShardJob } from "../../src/shard/rows";
import { stoppedFor } from "../../src/shard/run-stops";

const NOW = 1_000_000;
const RECHECK = 15_000;

const run = (id: string, jobId = "job_a", parentRunId: string | null = null): RunRow =>
  ({ id, jobId, state: "waiting", scheduledAt: 0, parentRunId }) as RunRow;
const job = (spec: Partial<ShardJob["spec"]>, rateNextAt: number | null = null, stopped = false) =>
  ({ spec, rateNextAt, paused: stopped, deleted: false }) as Pick<ShardJob, "spec" | "rateNextAt" | "paused" | "deleted">;

function plan(waiting: RunRow[], jobs: Record<string, ReturnType<typeof job>>, inFlight: Record<string, number> = {}) {
  const p = planAdmission(waiting, new Map(Object.entries(jobs)), (id) => inFlight[id] ?? 0, NOW, RECHECK, stoppedFor);
  return { candidates: p.candidates.map((r) => r.id), deferred: p.deferred.map((d) => [d.run.id, d.dueAt - NOW]) };
}

describe("admission: a job's own limits", () => {
  it("no limits: every waiting run is a candidate (the tenant's gate may still refuse)", () => {
    expect(plan([run("r1"), run("r2")], { job_a: job({}) })).toEqual({ candidates: ["r1", "r2"], deferred: [] });
  });

  it.each([
    [2, 0, ["r1", "r2"], ["r3"]],
    [2, 1, ["r1"], ["r2", "r3"]],
    [2, 2, [], ["r1", "r2", "r3"]],
    [5, 0, ["r1", "r2", "r3"], []],
  ])("maxConcurrency %i with %i in flight admits %j, defers %j to the re-check", (max, inFlight, admitted, deferred) => {
    const p = plan([run("r1"), run("r2"), run("r3")], { job_a: job({ maxConcurrency: max }) }, { job_a: inFlight });
    expect(p.candidates).toEqual(admitted);
    expect(p.deferred).toEqual(deferred.map((id) => [id, RECHECK]));
  });

  it("ratePerSecond: one run per pass, the next after 1/rate; a slot not yet come defers all", () => {
    expect(plan([run("r1"), run("r2")], { job_a: job({ ratePerSecond: 4 }) })).toEqual({ candidates: ["r1"], deferred: [["r2", 250]] });
    expect(plan([run("r1")], { job_a: job({ ratePerSecond: 4 }, NOW + 100) })).toEqual({ candidates: [], deferred: [["r1", 100]] });
    expect(plan([run("r1")], { job_a: job({ ratePerSecond: 4 }, NOW) })).toEqual({ candidates: ["r1"], deferred: [] });
  });

  it("limits are per job: another job's runs are not held back", () => {
    const p = plan([run("a1"), run("b1", "job_b"), run("a2"), run("b2", "job_b")], { job_a: job({ maxConcurrency: 1 }), job_b: job({}) });
    expect(p).toEqual({ candidates: ["a1", "b1", "b2"], deferred: [["a2", RECHECK]] });
  });

  it("a paused job's waiting runs are left for the alarm to cancel", () => {
    expect(plan([run("r1")], { job_a: job({}, null, true) })).toEqual({ candidates: [], deferred: [] });
  });

  it("a paused job's workflow step (held by a breaker) is a candidate: the alarm never cancels it, so it must go on", () => {
    const p = plan([run("r1.a", "job_a", "r1"), run("r2")], { job_a: job({}, null, true) });
    expect(p).toEqual({ candidates: ["r1.a"], deferred: [] });
  });
});
