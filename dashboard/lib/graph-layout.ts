import { type StepNode, topologicalOrder } from "../../src/workflow/graph.ts";

/** Each step's column: one more than its deepest parent's, so every step stands right of all it runs after. */
export function layers<S extends StepNode>(steps: readonly S[]): S[][] {
  const order = topologicalOrder(steps) ?? [...steps];
  const depth = new Map<string, number>();
  for (const step of order) depth.set(step.id, Math.max(-1, ...(step.after ?? []).map((p) => depth.get(p) ?? -1)) + 1);
  const columns: S[][] = [];
  for (const step of order) {
    const d = depth.get(step.id)!;
    columns[d] = [...(columns[d] ?? []), step];
  }
  return columns;
}
