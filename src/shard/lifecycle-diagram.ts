import { ATTEMPT_OUTCOMES, ATTEMPT_TRANSITIONS } from "../model/attempt-states";
import { FINAL_STATES, INITIAL_STATES, RUN_STATES, TRANSITIONS } from "../model/run-states";

/**
 * The lifecycle tables drawn as Mermaid state diagrams, for docs/architecture.md. Generated,
 * never drawn by hand: a test compares the document with these functions, so a diagram can
 * never show a transition the shard would refuse, or miss one it makes.
 */

export interface StateTable<S extends string, E extends string> {
  /** Every state, in the order they are drawn. */
  states: readonly S[];
  transitions: Readonly<Record<S, Partial<Record<E, S>>>>;
  initial: readonly S[];
  final: readonly S[];
  /** Where the diagram comes from, named inside it for whoever edits the document. */
  source: string;
}

/** Mermaid `stateDiagram-v2` text; the same table always gives the same text. */
export function stateDiagram<S extends string, E extends string>(table: StateTable<S, E>): string {
  const lines = ["stateDiagram-v2", `  %% generated from ${table.source} by npm run docs:diagrams: edit the table, not this`];
  for (const s of table.initial) lines.push(`  [*] --> ${s}`);
  for (const from of table.states) {
    const edges = Object.entries(table.transitions[from]) as Array<[E, S]>;
    for (const [event, to] of edges) lines.push(`  ${from} --> ${to}: ${event}`);
  }
  for (const s of table.final) lines.push(`  ${s} --> [*]`);
  return lines.join("\n");
}

export function runLifecycleDiagram(): string {
  return stateDiagram({
    states: RUN_STATES,
    transitions: TRANSITIONS,
    initial: INITIAL_STATES,
    final: FINAL_STATES,
    source: "src/model/run-states.ts",
  });
}

export function attemptLifecycleDiagram(): string {
  return stateDiagram({
    states: ATTEMPT_OUTCOMES,
    transitions: ATTEMPT_TRANSITIONS,
    initial: ["running"],
    final: ATTEMPT_OUTCOMES.filter((o) => Object.keys(ATTEMPT_TRANSITIONS[o]).length === 0),
    source: "src/model/attempt-states.ts",
  });
}

/** The generated diagrams, by the marker that places each in the document. */
export const DIAGRAMS: ReadonlyArray<{ marker: string; render: () => string }> = [
  { marker: "<!-- diagram: run-lifecycle -->", render: runLifecycleDiagram },
  { marker: "<!-- diagram: attempt-lifecycle -->", render: attemptLifecycleDiagram },
];

/** The marker, blank lines, then a mermaid fence: the block a marker owns. */
const blockAfter = (marker: string) =>
  new RegExp(`(${marker.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\n\\s*\`\`\`mermaid\\n)([\\s\\S]*?)(^\`\`\`)`, "m");

/** The text of the mermaid block that follows `marker` in `markdown`, or null when there is none. */
export function diagramBlock(markdown: string, marker: string): string | null {
  return blockAfter(marker).exec(markdown)?.[2]?.replace(/\n$/, "") ?? null;
}

/** `markdown` with every generated block replaced by what the tables give now. */
export function withDiagrams(markdown: string): string {
  let out = markdown;
  for (const { marker, render } of DIAGRAMS) {
    if (diagramBlock(out, marker) === null) throw new Error(`no \`\`\`mermaid block after ${marker}`);
    out = out.replace(blockAfter(marker), (_, head: string, _old: string, tail: string) => `${head}${render()}\n${tail}`);
  }
  return out;
}
