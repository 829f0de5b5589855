import { DurableObject } from "cloudflare:workers";
import { type Budget, fullBudget, keepBudget, SIGN_IN_RULE, spend, waitBefore } from "./failure-budget";

/** What was refused at sign-in: a credential that is wrong, or a wrong one from a throttled client. */
export type SignInRefusal = "invalid" | "throttled";

/**
 * The budgets one object holds at most: a name is ~50 characters and a budget two numbers, so
 * under 1 MiB an object, and THROTTLE_OBJECTS (sign-in-names.ts) times this for the deployment.
 */
export const MAX_BUDGETS = 4_096;

/**
 * One of a fixed set (`throttle-<n>`, sign-in-names.ts), holding the failed sign-ins lately made
 * (failure-budget.ts) by each client address (`address:<ip or /64>`) and key prefix
 * (`prefix:<first characters>`) whose name hashes to it, at most MAX_BUDGETS of them. One more,
 * `totals`, counts refusals for the metrics. The budgets live in memory: losing them on
 * eviction only forgives.
 */
export class SignInThrottle extends DurableObject<Env> {
  private readonly budgets = new Map<string, Budget>();

  /**
   * Records a failed sign-in for `name`: `refusedMs`, 0 while this client may still be told its
   * credential is wrong, else how long it must wait; `blockedMs`, how long its next try must wait (0: none).
   */
  async fail(name: string): Promise<{ refusedMs: number; blockedMs: number }> {
    const now = Date.now();
    const { budget, retryAfterMs } = spend(this.budgets.get(name) ?? fullBudget(SIGN_IN_RULE, now), SIGN_IN_RULE, now);
    keepBudget(this.budgets, name, budget, MAX_BUDGETS);
    return { refusedMs: retryAfterMs, blockedMs: waitBefore(budget, SIGN_IN_RULE, now) };
  }

  /** How long `name` must wait before its next try; 0: it may try now. */
  async wait(name: string): Promise<number> {
    const budget = this.budgets.get(name);
    return budget ? waitBefore(budget, SIGN_IN_RULE, Date.now()) : 0;
  }

  /** How many budgets this object holds (at most MAX_BUDGETS). */
  async held(): Promise<number> {
    return this.budgets.size;
  }

  /** Adds refusals counted by an isolate (src/api/sign-in-throttle.ts). */
  async count(batch: Record<SignInRefusal, number>): Promise<void> {
    // Kept in storage, unlike the budgets: a counter must never go back.
    const stored = await this.ctx.storage.get<number>(["invalid", "throttled"]);
    await this.ctx.storage.put({
      invalid: (stored.get("invalid") ?? 0) + batch.invalid,
      throttled: (stored.get("throttled") ?? 0) + batch.throttled,
    });
  }

  async totals(): Promise<Record<SignInRefusal, number>> {
    const stored = await this.ctx.storage.get<number>(["invalid", "throttled"]);
    return { invalid: stored.get("invalid") ?? 0, throttled: stored.get("throttled") ?? 0 };
  }
}
