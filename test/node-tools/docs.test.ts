import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ATTEMPT_OUTCOMES, ATTEMPT_TRANSITIONS } from "../../src/model/attempt-states";
import { RUN_STATES, TRANSITIONS } from "../../src/model/run-states";
import { DIAGRAMS, diagramBlock, runLifecycleDiagram, stateDiagram, withDiagrams } from "../../src/shard/lifecycle-diagram";

/**
 * docs/architecture.md shows the run and attempt lifecycles as diagrams generated from the
 * tables the shard enforces. A change to a table that is not redrawn fails here.
 */
const architecture = readFileSync(new URL("../../docs/architecture.md", import.meta.url), "utf8");
const REGENERATE = "run `npm run docs:diagrams` to redraw it from the table, and commit docs/architecture.md";

/** Edges of a rendered diagram, as `from --event--> to`. */
const edgesOf = (diagram: string) =>
  diagram
    .split("\n")
    .map((line) => /^\s*(\w+) --> (\w+): (\w+)$/.exec(line))
    .flatMap((m) => (m ? [`${m[1]} --${m[3]}--> ${m[2]}`] : []))
    .sort();

describe("docs/architecture.md", () => {
  it.each(DIAGRAMS.map((d) => [d.marker, d] as const))("the diagram after %s is the one its table gives", (marker, { render }) => {
    const block = diagramBlock(architecture, marker);
    expect(
      block,
      `docs/architecture.md has no \`\`\`mermaid block right after ${marker}; put one there (its content may be empty), then ${REGENERATE}`,
    ).not.toBeNull();
    expect(block, `the diagram after ${marker} differs from its table: ${REGENERATE}`).toBe(render());
  });

  it("redrawing a document that matches changes nothing", () => {
    expect(withDiagrams(architecture)).toBe(architecture);
  });
});

describe("the diagrams", () => {
  it("draw every transition of the run table, and nothing else", () => {
    const table = RUN_STATES.flatMap((from) => Object.entries(TRANSITIONS[from]).map(([event, to]) => `${from} --${event}--> ${to}`));
    expect(edgesOf(runLifecycleDiagram())).toEqual(table.sort());
  });

  it("draw every transition of the attempt table, and nothing else", () => {
    const table = ATTEMPT_OUTCOMES.flatMap((from) =>
      Object.entries(ATTEMPT_TRANSITIONS[from]).map(([event, to]) => `${from} --${event}--> ${to}`),
    );
    expect(edgesOf(DIAGRAMS[1]!.render())).toEqual(table.sort());
  });

  it("render a table as exactly this text", () => {
    const table = { states: ["a", "b"], transitions: { a: { go: "b" }, b: {} }, initial: ["a"], final: ["b"], source: "t" } as const;
    expect(stateDiagram(table)).toBe(
      "stateDiagram-v2\n  %% generated from t by npm run docs:diagrams: edit the table, not this\n  [*] --> a\n  a --> b: go\n  b --> [*]",
    );
  });

  it("replace only the block after each marker", () => {
    const doc = (run: string, attempt: string) =>
      `# x\n\n\`\`\`mermaid\nuntouched\n\`\`\`\n\n${DIAGRAMS[0]!.marker}\n\n\`\`\`mermaid\n${run}\`\`\`\n\ntext\n\n${DIAGRAMS[1]!.marker}\n\`\`\`mermaid\n${attempt}\`\`\`\n`;
    expect(withDiagrams(doc("old\n", ""))).toBe(doc(`${DIAGRAMS[0]!.render()}\n`, `${DIAGRAMS[1]!.render()}\n`));
    expect(() => withDiagrams("# no markers\n")).toThrow(/no ```mermaid block/);
  });
});

describe("README.md", () => {
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    engines: { node: string };
    devDependencies: Record<string, string>;
  };

  it("asks for the Node that engines asks for, and names the one npm install brings", () => {
    const engines = /^>=(\d+\.\d+)$/.exec(pkg.engines.node)?.[1];
    expect(engines, `engines.node is ${pkg.engines.node}, not >=X.Y`).toBeDefined();
    // Every "Node.js X or newer" / "Node X or newer" the README states is about running the project.
    const stated = [...readme.matchAll(/Node(?:\.js)?\s+(\d+(?:\.\d+)?)\s+or\s+newer/g)].map((m) => m[1]);
    expect(stated.length, "the README says which Node it needs").toBeGreaterThan(0);
    expect(new Set(stated)).toEqual(new Set([engines]));
    const brought = pkg.devDependencies.node!.split(".")[0];
    const brings = [...readme.matchAll(/brings\s+(?:the\s+)?Node\s+(\d+)/g)].map((m) => m[1]);
    expect(brings.length, "the README says which Node npm install brings").toBeGreaterThan(0);
    expect(new Set(brings)).toEqual(new Set([brought]));
  });
});
