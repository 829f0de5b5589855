import type { StepNode } from "./graph";

/**
 * A workflow's definition refused, each problem with the field it is in: the API answers 400
 * with these as the error's `issues` (paths relative to `steps`).
 */
export interface GraphIssue {
  path: string;
  message: string;
}

export const MAX_STEPS = 50;

export function graphIssues(steps: readonly StepNode[]): GraphIssue[] {
  const issues: GraphIssue[] = [];
  if (steps.length === 0) issues.push({ path: "steps", message: "a workflow has at least one step" });
  if (steps.length > MAX_STEPS) issues.push({ path: "steps", message: `at most ${MAX_STEPS} steps, got ${steps.length}` });
  const seen = new Map<string, number>();
  steps.forEach((step, i) => {
    const first = seen.get(step.id);
    if (first !== undefined) issues.push({ path: `steps.${i}.id`, message: `duplicate step id "${step.id}" (also steps.${first}.id)` });
    else seen.set(step.id, i);
  });
  steps.forEach((step, i) => {
    (step.after ?? []).forEach((parent, j) => {
      const path = `steps.${i}.after.${j}`;
      if (parent === step.id) issues.push({ path, message: `step "${step.id}" cannot run after itself` });
      else if (!seen.has(parent)) issues.push({ path, message: `no step has the id "${parent}"` });
    });
  });
  if (issues.length > 0) return issues; // a cycle is only looked for in a graph whose ids make sense
  const cycle = findCycle(steps);
  if (cycle) issues.push({ path: "steps", message: `the steps form a cycle: ${[...cycle, cycle[0]].join(" → ")}` });
  return issues;
}

/**
 * One cycle's steps in order, or null. Depth-first over "runs after" edges; the stack at the
 * step met twice is the cycle. Iterative in spirit but recursive here: at most 50 steps deep.
 */
export function findCycle(steps: readonly StepNode[]): string[] | null {
  const parentsOf = new Map(steps.map((s) => [s.id, s.after ?? []]));
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (id: string): string[] | null => {
    if (state.get(id) === "done") return null;
    if (state.get(id) === "open") return stack.slice(stack.indexOf(id)).reverse();
    state.set(id, "open");
    stack.push(id);
    for (const parent of parentsOf.get(id) ?? []) {
      const cycle = visit(parent);
      if (cycle) return cycle;
    }
    stack.pop();
    state.set(id, "done");
    return null;
  };
  for (const step of steps) {
    const cycle = visit(step.id);
    if (cycle) return cycle;
  }
  return null;
}
