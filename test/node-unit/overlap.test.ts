import { describe, expect, it } from "vitest";
import { decideOverlap } from "../../src/shard/overlap";

const running = [{ id: "run_a", state: "running" as const }];

describe("overlap policy table", () => {
  it.each([
    ["allow", [], false, { run: "queued", cancel: [] }],
    ["allow", running, false, { run: "queued", cancel: [] }],
    ["forbid", [], false, { run: "queued", cancel: [] }],
    ["forbid", running, false, { run: "skipped", reason: "overlap forbid: run run_a is still running" }],
    ["buffer_one", [], false, { run: "queued", cancel: [] }],
    ["buffer_one", running, false, { run: "buffered" }],
    ["buffer_one", running, true, { run: "skipped", reason: "overlap buffer_one: a fire already waits" }],
    ["replace", [], false, { run: "queued", cancel: [] }],
    ["replace", [...running, { id: "run_b", state: "queued" as const }], false, { run: "queued", cancel: ["run_a", "run_b"] }],
  ] as const)("%s with %j unfinished (buffered: %s) → %j", (policy, unfinished, buffered, decision) => {
    expect(decideOverlap(policy, unfinished, buffered)).toEqual(decision);
  });
});
