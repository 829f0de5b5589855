/**
 * A workflow's graph: which steps may start, which can no longer start, and how the run ends,
 * decided from the steps' states alone. Pure: the shard applies what this returns in the
 * transaction that recorded the state that changed (issue 11; docs/workflows.md).
 *
 * A step waits until every parent has ended; its `when` then decides:
 *   all_succeeded (default)  every parent succeeded
 *   all_done                 every parent ended, whatever the outcome
 *   any_failed               at least one parent failed (cleanup and alert steps)
 * A step whose `when` can no longer hold is skipped, and that is final for it: all_succeeded is
 * settled as soon as one parent ends otherwise; the others once every parent has ended.
 */

export const STEP_CONDITIONS = ["all_succeeded", "all_done", "any_failed"] as const;
export type StepCondition = (typeof STEP_CONDITIONS)[number];

export interface StepNode {
  id: string;
  after?: readonly string[];
  when?: StepCondition;
}

/**
 * How a step stands, as the graph sees it:
 * - `blocked`: not started, waiting for its parents;
 * - `active`: started and not ended (queued, running, retrying: the run machinery's business);
 * - `succeeded`, `failed` (the target refused or every attempt failed);
 * - `skipped`: its `when` could not hold. `upstreamFailed` says whether that was because
 *   something above it failed (so an any_failed step below it still sees a failure) or
 *   because its condition was simply not met (an any_failed step with nothing to clean up).
 */
export type StepStatus =
  | { state: "blocked" }
  | { state: "active" }
  | { state: "succeeded" }
  | { state: "failed" }
  | { state: "skipped"; upstreamFailed: boolean };

export type StepStatuses = Readonly<Record<string, StepStatus>>;

const ENDED = new Set(["succeeded", "failed", "skipped"]);

function hasEnded(status: StepStatus): boolean {
  return ENDED.has(status.state);
}

/** A failure as a step below sees it: the parent failed, or was skipped because something above it did. */
function sawFailure(status: StepStatus): boolean {
  return status.state === "failed" || (status.state === "skipped" && status.upstreamFailed);
}

export type Readiness = "wait" | "start" | { skip: { upstreamFailed: boolean } };

/** What a blocked step should do now, given its parents' statuses. */
function readiness(step: StepNode, statuses: StepStatuses): Readiness {
  const parents = (step.after ?? []).map((id) => statuses[id] ?? { state: "blocked" as const });
  const when = step.when ?? "all_succeeded";
  const failedAbove = parents.some(sawFailure);
  if (when === "all_succeeded") {
    // Settled by the first parent that ended any other way: no need to wait for the rest.
    if (parents.some((p) => hasEnded(p) && p.state !== "succeeded")) return { skip: { upstreamFailed: failedAbove } };
    return parents.every((p) => p.state === "succeeded") ? "start" : "wait";
  }
  if (!parents.every(hasEnded)) return "wait";
  if (when === "all_done") return "start";
  return failedAbove ? "start" : { skip: { upstreamFailed: false } };
}

export interface Advance {
  /** Steps to dispatch now. */
  start: string[];
  /** Steps that end skipped now, with why. */
  skip: Array<{ id: string; upstreamFailed: boolean }>;
}

/**
 * Every decision the statuses allow at once: the steps to start, and the steps to skip, skips
 * propagating down the graph in one pass (a skipped step may settle its children at once).
 * `steps` must be in an order where parents come first (`topologicalOrder`).
 */
export function advance(steps: readonly StepNode[], statuses: StepStatuses): Advance {
  const now: Record<string, StepStatus> = { ...statuses };
  const result: Advance = { start: [], skip: [] };
  for (const step of steps) {
    if ((now[step.id]?.state ?? "blocked") !== "blocked") continue;
    const decision = readiness(step, now);
    if (decision === "start") {
      result.start.push(step.id);
      now[step.id] = { state: "active" };
    } else if (decision !== "wait") {
      result.skip.push({ id: step.id, upstreamFailed: decision.skip.upstreamFailed });
      now[step.id] = { state: "skipped", upstreamFailed: decision.skip.upstreamFailed };
    }
  }
  return result;
}

/**
 * The run's outcome once every step has ended, else null: `failed` when a step failed (the run
 * is a dead letter, and a retry re-runs what did not succeed), `succeeded` otherwise, skipped
 * steps included (an alert step with nothing to report is not a failure).
 */
export function runOutcome(steps: readonly StepNode[], statuses: StepStatuses): "succeeded" | "failed" | null {
  const all = steps.map((s) => statuses[s.id] ?? { state: "blocked" as const });
  if (!all.every(hasEnded)) return null;
  return all.some((s) => s.state === "failed") ? "failed" : "succeeded";
}

/**
 * What a retry of a failed run re-runs: every step that did not succeed. The succeeded steps
 * keep their results, as Airflow's "clear failed" does; those returned go back to `blocked` and
 * `advance` starts them when their parents allow.
 */
export function stepsToRerun(steps: readonly StepNode[], statuses: StepStatuses): string[] {
  return steps.filter((s) => statuses[s.id]?.state !== "succeeded").map((s) => s.id);
}

/** The steps with every parent before it (Kahn's algorithm, stable in definition order); null when there is a cycle. */
export function topologicalOrder<S extends StepNode>(steps: readonly S[]): S[] | null {
  const byId = new Map(steps.map((s) => [s.id, s]));
  const pending = new Map(steps.map((s) => [s.id, new Set((s.after ?? []).filter((p) => byId.has(p)))]));
  const order: S[] = [];
  while (order.length < steps.length) {
    const ready = steps.filter((s) => pending.get(s.id)?.size === 0);
    if (ready.length === 0) return null;
    for (const step of ready) {
      order.push(step);
      pending.delete(step.id);
      for (const parents of pending.values()) parents.delete(step.id);
    }
  }
  return order;
}
