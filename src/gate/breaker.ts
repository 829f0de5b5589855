import { type JobSpec, originOf, type StoredTarget } from "../model/job";
import type { BreakerKey } from "../protocol/queue-messages";

/**
 * A circuit breaker for the calls one tenant's jobs make to one origin (docs/jobs-and-schedules.md, "Circuit breakers").
 * Closed: calls go through; `FAILURES_TO_OPEN` failures in a row, within `FAILURE_WINDOW_MS`,
 * open it. Open: runs for the origin wait (their attempts are not spent) until `retryAt`. Then
 * half-open: one run goes through as a probe; its success closes the breaker, its failure opens
 * it again for twice as long (at most `MAX_COOLDOWN_MS`). A probe that never reports (its
 * consumer died) is replaced after `PROBE_LEASE_MS`. Pure: the tenant's gate keeps the state.
 */

export const FAILURES_TO_OPEN = 5;
export const FAILURE_WINDOW_MS = 10 * 60_000;
export const BASE_COOLDOWN_MS = 30_000;
export const MAX_COOLDOWN_MS = 30 * 60_000;
export const PROBE_LEASE_MS = 60_000;

export type BreakerPosition = "closed" | "open" | "half_open";

export interface Breaker {
  origin: string;
  state: BreakerPosition;
  /** Failures in a row, the first of them at `firstFailureAt`. */
  failures: number;
  firstFailureAt: number | null;
  openedAt: number | null;
  /** Open: when a probe may go. Half-open: when the probe out counts as lost. */
  retryAt: number | null;
  cooldownMs: number;
  /** Runs held since the breaker last opened. */
  held: number;
}

export const closedBreaker = (origin: string): Breaker => ({
  origin,
  state: "closed",
  failures: 0,
  firstFailureAt: null,
  openedAt: null,
  retryAt: null,
  cooldownMs: BASE_COOLDOWN_MS,
  held: 0,
});

/** What a failure is, for a breaker: the origin is down or overloaded, not a refusal of one request. */
export function countsAsFailure(status: number | null, refused: boolean): boolean {
  if (refused) return false; // the SSRF guard or a bad request: nothing about the origin's health
  return status === null || status >= 500 || status === 429 || status === 408;
}

/**
 * `runs` runs want to call the origin now: how many may (`pass`), and until when the others
 * wait. The breaker as it is after the check comes back too (a probe granted moves it).
 */
export function check(b: Breaker, runs: number, now: number): { breaker: Breaker; pass: number; waitUntil: number | null } {
  if (b.state === "closed") return { breaker: b, pass: runs, waitUntil: null };
  if (b.retryAt !== null && now < b.retryAt) {
    return { breaker: { ...b, held: b.held + runs }, pass: 0, waitUntil: b.retryAt };
  }
  // Open and cooled down, or half-open with its probe lost: one run goes, as the probe.
  const breaker: Breaker = { ...b, state: "half_open", retryAt: now + PROBE_LEASE_MS, held: b.held + runs - 1 };
  return { breaker, pass: Math.min(1, runs), waitUntil: runs > 1 ? breaker.retryAt : null };
}

/** An attempt's outcome against the origin: `ok` true (it answered), false (a failure), null (neither). */
export function record(b: Breaker, ok: boolean | null, now: number): Breaker {
  if (ok === null) return b;
  if (ok) return b.state === "closed" && b.failures === 0 ? b : closedBreaker(b.origin);
  if (b.state === "half_open") {
    const cooldownMs = Math.min(b.cooldownMs * 2, MAX_COOLDOWN_MS);
    return { ...b, state: "open", openedAt: now, retryAt: now + cooldownMs, cooldownMs };
  }
  if (b.state === "open") return b; // a run started before it opened: it is open already
  const fresh = b.firstFailureAt === null || now - b.firstFailureAt > FAILURE_WINDOW_MS;
  const failures = fresh ? 1 : b.failures + 1;
  const firstFailureAt = fresh ? now : b.firstFailureAt;
  if (failures < FAILURES_TO_OPEN) return { ...b, failures, firstFailureAt };
  return { ...b, state: "open", failures, firstFailureAt, openedAt: now, retryAt: now + b.cooldownMs, held: 0 };
}

/**
 * The breaker a run's dispatch names: its tenant's, for the origin of what the run calls (the
 * job's target, or a workflow step's); none if the job opted out or the run calls nothing.
 */
export function breakerKey(
  job: { tenantId: string; spec: Pick<JobSpec, "breaker"> } | null,
  target: StoredTarget | null,
): BreakerKey | Record<string, never> {
  if (!job || !target || job.spec.breaker === false) return {};
  const origin = originOf(target);
  // An URL the API accepted always has one; nothing to key a breaker on otherwise.
  return origin === "null" ? {} : { tenantId: job.tenantId, origin };
}
