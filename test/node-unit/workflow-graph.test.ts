import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  advance,
  runOutcome,
  STEP_CONDITIONS,
  type StepNode,
  type StepStatus,
  stepsToRerun,
  topologicalOrder,
} from "../../src/workflow/graph";
import { findCycle, graphIssues } from "../../src/workflow/validate";

/** A random DAG: step i may only run after steps before it, so there is never a cycle. */
const dag = fc.integer({ min: 1, max: 50 }).chain((n) =>
  fc
    .tuple(
      ...Array.from({ length: n }, (_, i) =>
        fc.record({
          after: i === 0 ? fc.constant([] as number[]) : fc.uniqueArray(fc.integer({ min: 0, max: i - 1 }), { maxLength: Math.min(i, 4) }),
          when: fc.constantFrom(...STEP_CONDITIONS),
        }),
      ),
    )
    .map((specs) => specs.map((s, i): StepNode => ({ id: `s${i}`, after: s.after.map((p) => `s${p}`), when: s.when }))),
);

/** Definition order shuffled: the graph, not the array, decides the order. */
const shuffledDag = dag.chain((steps) => fc.shuffledSubarray(steps, { minLength: steps.length, maxLength: steps.length }));

interface Trace {
  statuses: Record<string, StepStatus>;
  /** In the order they happened: a step started, or ended. */
  events: Array<{ id: string; kind: "start" | "end" | "skip" }>;
}

/**
 * Plays a run to its end: `advance` decides, then one started step (chosen by `pick`) ends with
 * the outcome `fails` gives it, until nothing is active. As the shard does, one event at a time.
 */
function play(
  steps: StepNode[],
  pick: (active: string[]) => number,
  fails: (id: string) => boolean,
  from: Record<string, StepStatus> = {},
): Trace {
  const order = topologicalOrder(steps)!;
  const statuses: Record<string, StepStatus> = {
    ...Object.fromEntries(steps.map((s) => [s.id, { state: "blocked" } as StepStatus])),
    ...from,
  };
  const events: Trace["events"] = [];
  for (let guard = 0; guard < 1_000; guard++) {
    const { start, skip } = advance(order, statuses);
    // Skips first: a start in the same pass may rest on a skip (an any_failed step below it),
    // never the other way round (a started step has not ended).
    for (const { id, upstreamFailed } of skip) {
      statuses[id] = { state: "skipped", upstreamFailed };
      events.push({ id, kind: "skip" });
    }
    for (const id of start) {
      statuses[id] = { state: "active" };
      events.push({ id, kind: "start" });
    }
    const active = Object.keys(statuses).filter((id) => statuses[id]!.state === "active");
    if (active.length === 0) break;
    const id = active[pick(active) % active.length]!;
    statuses[id] = { state: fails(id) ? "failed" : "succeeded" };
    events.push({ id, kind: "end" });
  }
  return { statuses, events };
}

const ENDED_STATES = new Set(["succeeded", "failed", "skipped"]);

describe("workflow graph: random DAGs played to the end", () => {
  it("no step starts before every parent ended; every step ends exactly once; skipped steps never start", () => {
    fc.assert(
      fc.property(shuffledDag, fc.array(fc.nat()), fc.func(fc.boolean()), (steps, picks, failsFn) => {
        let p = 0;
        const { statuses, events } = play(
          steps,
          () => picks[p++ % Math.max(picks.length, 1)] ?? 0,
          (id) => failsFn(id),
        );
        const endedAt = new Map<string, number>();
        events.forEach((e, i) => {
          if (e.kind !== "start") {
            expect(endedAt.has(e.id), `${e.id} ended twice`).toBe(false);
            endedAt.set(e.id, i);
          }
        });
        for (const [i, e] of events.entries()) {
          if (e.kind !== "start") continue;
          const step = steps.find((s) => s.id === e.id)!;
          for (const parent of step.after ?? [])
            expect(endedAt.get(parent) ?? Infinity, `${e.id} started before ${parent} ended`).toBeLessThan(i);
          expect(events.filter((x) => x.id === e.id && x.kind === "start")).toHaveLength(1);
          expect(events.some((x) => x.id === e.id && x.kind === "skip")).toBe(false);
        }
        // Every step of a finished run is in a final state, and the run has an outcome.
        for (const step of steps) expect(ENDED_STATES.has(statuses[step.id]!.state), step.id).toBe(true);
        expect(runOutcome(steps, statuses)).toBe(Object.values(statuses).some((s) => s.state === "failed") ? "failed" : "succeeded");
      }),
      { numRuns: 500 },
    );
  });

  it("each step's `when` holds for the steps that ran and fails for the steps skipped", () => {
    fc.assert(
      fc.property(dag, fc.func(fc.boolean()), (steps, failsFn) => {
        const { statuses, events } = play(
          steps,
          () => 0,
          (id) => failsFn(id),
        );
        const failedAbove = (id: string): boolean => {
          const s = statuses[id]!;
          return s.state === "failed" || (s.state === "skipped" && s.upstreamFailed);
        };
        for (const step of steps) {
          const parents = step.after ?? [];
          const ran = events.some((e) => e.id === step.id && e.kind === "start");
          const holds =
            step.when === "all_done"
              ? true
              : step.when === "any_failed"
                ? parents.some(failedAbove)
                : parents.every((p) => statuses[p]!.state === "succeeded");
          expect(ran, `${step.id} (${step.when} after ${parents.join(",")})`).toBe(holds);
        }
      }),
      { numRuns: 500 },
    );
  });

  it("a retry re-runs exactly the steps that did not succeed, and never a succeeded one", () => {
    fc.assert(
      fc.property(dag, fc.func(fc.boolean()), (steps, failsFn) => {
        const first = play(
          steps,
          () => 0,
          (id) => failsFn(id),
        );
        const rerun = stepsToRerun(steps, first.statuses);
        expect(rerun.sort()).toEqual(
          steps
            .filter((s) => first.statuses[s.id]!.state !== "succeeded")
            .map((s) => s.id)
            .sort(),
        );
        const kept = Object.fromEntries(Object.entries(first.statuses).filter(([id]) => !rerun.includes(id)));
        // This time nothing fails: the run succeeds, and no succeeded step started again.
        const second = play(
          steps,
          () => 0,
          () => false,
          kept,
        );
        for (const e of second.events) expect(rerun, `${e.id} ran again`).toContain(e.id);
        expect(runOutcome(steps, second.statuses)).toBe("succeeded");
      }),
      { numRuns: 300 },
    );
  });
});

describe("workflow graph: validation", () => {
  it("accepts every DAG, in any definition order", () => {
    fc.assert(
      fc.property(shuffledDag, (steps) => {
        expect(graphIssues(steps)).toEqual([]);
        const order = topologicalOrder(steps)!.map((s) => s.id);
        for (const step of steps) for (const parent of step.after ?? []) expect(order.indexOf(parent)).toBeLessThan(order.indexOf(step.id));
      }),
      { numRuns: 300 },
    );
  });

  it("finds the cycle a back edge makes and names the steps on it", () => {
    fc.assert(
      fc.property(
        dag.filter((s) => s.length >= 2),
        fc.nat(),
        (steps, seed) => {
          // Take a chain of "after" links from a step with parents up to a root, then close it.
          const withParents = steps.filter((s) => (s.after ?? []).length > 0);
          fc.pre(withParents.length > 0);
          const from = withParents[seed % withParents.length]!;
          const root = (function up(id: string): string {
            const parent = steps.find((s) => s.id === id)!.after?.[0];
            return parent ? up(parent) : id;
          })(from.id);
          const cyclic = steps.map((s) => (s.id === root ? { ...s, after: [...(s.after ?? []), from.id] } : s));
          const issues = graphIssues(cyclic);
          expect(issues).toHaveLength(1);
          expect(issues[0]!.message).toMatch(/cycle/);
          const cycle = findCycle(cyclic)!;
          // Each step on the cycle runs after the one before it.
          cycle.forEach((id, i) => {
            const next = cycle[(i + 1) % cycle.length]!;
            expect(cyclic.find((s) => s.id === next)!.after).toContain(id);
          });
          expect(issues[0]!.message).toContain(`${cycle.join(" → ")} → ${cycle[0]}`);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("names unknown, duplicate and self references, and too many steps", () => {
    expect(graphIssues([{ id: "a" }, { id: "a" }, { id: "b", after: ["b", "zz"] }])).toEqual([
      { path: "steps.1.id", message: 'duplicate step id "a" (also steps.0.id)' },
      { path: "steps.2.after.0", message: 'step "b" cannot run after itself' },
      { path: "steps.2.after.1", message: 'no step has the id "zz"' },
    ]);
    expect(graphIssues([])).toEqual([{ path: "steps", message: "a workflow has at least one step" }]);
    expect(graphIssues(Array.from({ length: 51 }, (_, i) => ({ id: `s${i}` })))).toEqual([
      { path: "steps", message: "at most 50 steps, got 51" },
    ]);
    expect(
      graphIssues([
        { id: "a", after: ["b"] },
        { id: "b", after: ["a"] },
      ]),
    ).toEqual([{ path: "steps", message: "the steps form a cycle: b → a → b" }]);
  });
});

describe("workflow graph: the issue's example", () => {
  // extract, then transform and validate in parallel, then load; alert if anything failed.
  const steps: StepNode[] = [
    { id: "extract" },
    { id: "transform", after: ["extract"] },
    { id: "validate", after: ["extract"] },
    { id: "load", after: ["transform", "validate"] },
    { id: "alert", after: ["load"], when: "any_failed" },
  ];
  it("a failing middle step skips load (upstream failed) and starts the alert", () => {
    const { statuses, events } = play(
      steps,
      () => 0,
      (id) => id === "validate",
    );
    expect(statuses.load).toEqual({ state: "skipped", upstreamFailed: true });
    expect(statuses.alert).toEqual({ state: "succeeded" });
    expect(events.filter((e) => e.kind === "start").map((e) => e.id)).toEqual(["extract", "transform", "validate", "alert"]);
    expect(runOutcome(steps, statuses)).toBe("failed");
  });
  it("when all goes well the alert is skipped and the run succeeds", () => {
    const { statuses } = play(
      steps,
      () => 0,
      () => false,
    );
    expect(statuses.alert).toEqual({ state: "skipped", upstreamFailed: false });
    expect(runOutcome(steps, statuses)).toBe("succeeded");
  });
});
