export interface BackoffPolicy {
  initialMs: number;
  maxMs: number;
  factor: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { initialMs: 1_000, maxMs: 300_000, factor: 2 };

export type Jitter = "full" | "none";

/**
 * Delay before attempt `nextAttempt` (2 for the first retry): the cap grows exponentially,
 * min(maxMs, initialMs · factor^(nextAttempt − 2)); with full jitter the delay is a uniform
 * draw in [0, cap]. Full jitter spreads a herd of failures that happened together (a target
 * outage) instead of bringing them all back at the same instant.
 * `random` is injected so tests can pin the draw.
 */
export function retryDelay(
  nextAttempt: number,
  policy: BackoffPolicy = DEFAULT_BACKOFF,
  jitter: Jitter = "full",
  random = Math.random,
): number {
  const exponent = Math.max(0, nextAttempt - 2);
  const cap = Math.min(policy.maxMs, policy.initialMs * policy.factor ** exponent);
  return jitter === "full" ? Math.round(random() * cap) : cap;
}
