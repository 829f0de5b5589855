import { describe, expect, it } from "vitest";
import { fullBudget, spend, waitBefore } from "../../src/gate/failure-budget";

const rule = { capacity: 5, periodMs: 60_000 };

describe("the failed sign-in budget", () => {
  it("allows `capacity` failures at once, then refuses with a wait, and the next try waits too", () => {
    let budget = fullBudget(rule, 0);
    for (let i = 0; i < rule.capacity; i++) {
      const spent = spend(budget, rule, 0);
      expect(spent.retryAfterMs, `failure ${i + 1}`).toBe(0);
      budget = spent.budget;
    }
    expect(waitBefore(budget, rule, 0)).toBe(rule.periodMs / rule.capacity);
    const refused = spend(budget, rule, 0);
    expect(refused.retryAfterMs).toBeGreaterThan(0);
  });

  it("earns failures back at capacity per period, never above capacity", () => {
    let budget = fullBudget(rule, 0);
    for (let i = 0; i < rule.capacity; i++) budget = spend(budget, rule, 0).budget;
    expect(waitBefore(budget, rule, rule.periodMs / rule.capacity)).toBe(0);
    expect(spend(budget, rule, rule.periodMs / rule.capacity).retryAfterMs).toBe(0);
    const rested = spend(budget, rule, 10 * rule.periodMs).budget;
    expect(rested.tokens).toBe(rule.capacity - 1);
  });

  it("a client that keeps failing while refused stays refused, but no longer than about a period after it stops", () => {
    let budget = fullBudget(rule, 0);
    for (let i = 0; i < 1_000; i++) budget = spend(budget, rule, i).budget;
    expect(waitBefore(budget, rule, 1_000)).toBeGreaterThan(rule.periodMs);
    expect(waitBefore(budget, rule, 1_000 + 2 * rule.periodMs + 1)).toBe(0);
  });
});
