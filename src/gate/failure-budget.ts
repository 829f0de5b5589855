/**
 * How many failed sign-ins a client address (or a key prefix) may make: a bucket of `capacity`
 * failures that refills at `capacity` per `periodMs`, so a person who mistypes a key a few
 * times is never held up while a guesser is held to a trickle. Pure: the caller keeps the state.
 */

export interface Budget {
  /** Failures still allowed now; may go below zero while refused ones keep coming. */
  tokens: number;
  at: number;
}

export interface BudgetRule {
  capacity: number;
  periodMs: number;
}

/** Per client address and per key prefix: 20 failures, refilled over a minute. */
export const SIGN_IN_RULE: BudgetRule = { capacity: 20, periodMs: 60_000 };

export const fullBudget = (rule: BudgetRule, now: number): Budget => ({ tokens: rule.capacity, at: now });

function refilled(budget: Budget, rule: BudgetRule, now: number): Budget {
  const earned = ((now - budget.at) / rule.periodMs) * rule.capacity;
  return { tokens: Math.min(rule.capacity, budget.tokens + Math.max(0, earned)), at: now };
}

/** How long until one more failure is allowed; 0 when it is now. */
function waitMs(budget: Budget, rule: BudgetRule): number {
  return budget.tokens >= 1 ? 0 : Math.ceil(((1 - budget.tokens) / rule.capacity) * rule.periodMs);
}

/**
 * Records a failure: 0 when it was still allowed (the client is told its credential is wrong),
 * else how long to wait. Refused failures count too, down to one period's worth below zero: a
 * client that keeps failing while refused stays refused, but no longer than a period after it stops.
 */
export function spend(budget: Budget, rule: BudgetRule, now: number): { budget: Budget; retryAfterMs: number } {
  const before = refilled(budget, rule, now);
  const after = { tokens: Math.max(-rule.capacity, before.tokens - 1), at: now };
  return { budget: after, retryAfterMs: before.tokens >= 1 ? 0 : waitMs(after, rule) };
}

/** Whether a sign-in may be tried now, without spending: 0, or how long to wait. */
export function waitBefore(budget: Budget, rule: BudgetRule, now: number): number {
  return waitMs(refilled(budget, rule, now), rule);
}

/**
 * Records `budget` as `name`'s, the most recently spent, and drops the least recently spent past
 * `max` names: what an object holds stays bounded however many clients fail. Dropping a budget
 * forgives its client, the safe way to err now that a valid credential is never refused.
 */
export function keepBudget(budgets: Map<string, Budget>, name: string, budget: Budget, max: number): void {
  budgets.delete(name);
  budgets.set(name, budget);
  for (const oldest of budgets.keys()) {
    if (budgets.size <= max) break;
    budgets.delete(oldest);
  }
}
