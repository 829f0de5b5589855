import { describe, expect, it } from "vitest";
import { decideGrants, type GroupState, type PermitAsk } from "../../src/gate/grants";
import { parsePermitKey, permitKey } from "../../src/gate/permit-keys";

const group = (key: string, limits: { parallelism?: number; rate?: number; periodMs?: number }) => ({ key, ...limits });
const ask = (permit: string, over: Partial<PermitAsk> = {}): PermitAsk => ({ permit, tenant: false, ...over });

describe("permit keys", () => {
  it("say what a run holds, and a key of before groups is a tenant permit", () => {
    for (const h of [
      { base: "run_a#1", tenant: true, group: null },
      { base: "run_a#2", tenant: false, group: "queue:q|x" },
      { base: "run_a#3", tenant: true, group: "g" },
    ])
      expect(parsePermitKey(permitKey(h))).toEqual(h);
    expect(parsePermitKey("run_a#1")).toEqual({ base: "run_a#1", tenant: true, group: null });
  });
});

describe("decideGrants", () => {
  it("grants a group's runs up to its parallelism, in order, and counts the others as waiting", () => {
    const g = group("g", { parallelism: 2 });
    const d = decideGrants([ask("a", { group: g }), ask("b", { group: g }), ask("c", { group: g })], new Set(), Infinity, new Map(), 0);
    expect(d.granted).toEqual(["a", "b"]);
    expect(d.groupRefused.get("g")).toBe(1);
  });

  it("counts what the group already holds, and a held permit is renewed, not taken twice", () => {
    const before = new Map<string, GroupState>([["g", { inFlight: 1, windowStart: 0, started: 0, override: null }]]);
    const g = group("g", { parallelism: 1 });
    const d = decideGrants([ask("a", { group: g }), ask("b", { group: g })], new Set(["a"]), Infinity, before, 0);
    expect(d.granted).toEqual(["a"]);
    expect(d.renewed).toEqual(["a"]);
  });

  it("a group's own limits win over its job's", () => {
    const before = new Map<string, GroupState>([["g", { inFlight: 0, windowStart: 0, started: 0, override: { parallelism: 3 } }]]);
    const g = group("g", { parallelism: 1 });
    const d = decideGrants(
      ["a", "b", "c", "d"].map((p) => ask(p, { group: g })),
      new Set(),
      Infinity,
      before,
      0,
    );
    expect(d.granted).toEqual(["a", "b", "c"]);
  });

  it("starts at most rate per window, and says when the next window opens", () => {
    const g = group("g", { rate: 2, periodMs: 1_000 });
    const d = decideGrants(
      ["a", "b", "c"].map((p) => ask(p, { group: g })),
      new Set(),
      Infinity,
      new Map(),
      5_300,
    );
    expect(d.granted).toEqual(["a", "b"]);
    expect(d.retryAt.get("g")).toBe(6_000);
    const later = decideGrants([ask("c", { group: g })], new Set(), Infinity, d.groups, 6_000);
    expect(later.granted).toEqual(["c"]);
  });

  it("a run needs every place it is under: the tenant's refusal takes nothing of its group", () => {
    const g = group("g", { parallelism: 5, rate: 10 });
    const d = decideGrants([ask("a", { tenant: true, group: g }), ask("b", { tenant: true, group: g })], new Set(), 1, new Map(), 0);
    expect(d.granted).toEqual(["a"]);
    expect(d.tenantRefused).toBe(1);
    expect(d.groups.get("g")).toMatchObject({ inFlight: 1, started: 1 });
  });
});
