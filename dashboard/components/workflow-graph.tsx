import type { StepNode } from "../../src/workflow/graph.ts";
import { layers } from "../lib/graph-layout.ts";

const WHEN_WORDS: Record<NonNullable<StepNode["when"]>, string> = {
  all_succeeded: "when all succeeded",
  all_done: "when all ended",
  any_failed: "when any failed",
};

/**
 * A workflow job's graph, left to right in the order steps can run: a column per depth, each
 * step a card naming what it runs after and when; with a run's step states when given.
 * Written as lists rather than drawn edges, so it reads the same to a screen reader.
 */
export function WorkflowGraph({ steps, states }: { steps: readonly StepNode[]; states?: Readonly<Record<string, string>> }) {
  return (
    <ol class="graph" aria-label="Workflow steps, in the order they can run">
      {layers(steps).map((column, i) => (
        <li key={i}>
          <ul>
            {column.map((step) => {
              const state = states?.[step.id];
              return (
                <li key={step.id} class="step">
                  <strong>{step.id}</strong>
                  {state && <span class={`badge state-${state}`}>{state.replace("_", " ")}</span>}
                  {(step.after ?? []).length > 0 && (
                    <span class="after">
                      after {step.after!.join(", ")}
                      {step.when && step.when !== "all_succeeded" ? `, ${WHEN_WORDS[step.when]}` : ""}
                    </span>
                  )}
                </li>
              );
            })}
          </ul>
        </li>
      ))}
    </ol>
  );
}
