import { DurableObject } from "cloudflare:workers";
import { type Budget, fullBudget, SIGN_IN_RULE, spend, waitBefore } from "./failure-budget";

/** What was refused at sign-in: a credential that is wrong, or any credential from a throttled client. */
export type SignInRefusal = "invalid" | "throttled";

/**
 * One per client address (`address:<ip>`) and per key prefix (`prefix:<first characters>`):
 * the failed sign-ins it made lately (failure-budget.ts). One more, `totals`, counts refusals
 * for the metrics. The budget lives in memory: losing it on eviction only forgives a client.
 */
export class SignInThrottle extends DurableObject<Env> {
  private budget: Budget | null = null;

  /**
   * Records a failed sign-in: `refusedMs`, 0 while this client may still be told its credential
   * is wrong, else how long it must wait; `blockedMs`, how long its next try must wait (0: none).
   */
  async fail(): Promise<{ refusedMs: number; blockedMs: number }> {
    const now = Date.now();
    const { budget, retryAfterMs } = spend(this.budget ?? fullBudget(SIGN_IN_RULE, now), SIGN_IN_RULE, now);
    this.budget = budget;
    return { refusedMs: retryAfterMs, blockedMs: waitBefore(budget, SIGN_IN_RULE, now) };
  }

  /** How long the client must wait before its next try; 0: it may try now. */
  async wait(): Promise<number> {
    return this.budget ? waitBefore(this.budget, SIGN_IN_RULE, Date.now()) : 0;
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
