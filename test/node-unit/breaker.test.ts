import { describe, expect, it } from "vitest";
import {
  BASE_COOLDOWN_MS,
  check,
  closedBreaker,
  countsAsFailure,
  FAILURE_WINDOW_MS,
  FAILURES_TO_OPEN,
  MAX_COOLDOWN_MS,
  PROBE_LEASE_MS,
  record,
} from "../../src/gate/breaker";

const ORIGIN = "https://api.example.com";
const failTimes = (n: number, from = 0) => {
  let b = closedBreaker(ORIGIN);
  for (let i = 0; i < n; i++) b = record(b, false, from + i);
  return b;
};

describe("circuit breaker", () => {
  it("opens after N failures in a row, not before, and a success in between starts the count again", () => {
    expect(failTimes(FAILURES_TO_OPEN - 1).state).toBe("closed");
    expect(failTimes(FAILURES_TO_OPEN)).toMatchObject({ state: "open", retryAt: FAILURES_TO_OPEN - 1 + BASE_COOLDOWN_MS });
    const interrupted = record(record(failTimes(FAILURES_TO_OPEN - 1), true, 10), false, 11);
    expect(interrupted).toMatchObject({ state: "closed", failures: 1 });
  });

  it("failures further apart than the window do not add up", () => {
    let b = failTimes(FAILURES_TO_OPEN - 1);
    b = record(b, false, FAILURE_WINDOW_MS + 1_000);
    expect(b).toMatchObject({ state: "closed", failures: 1 });
  });

  it("open: runs wait until retryAt; then one probe goes and the rest wait for it", () => {
    const open = failTimes(FAILURES_TO_OPEN);
    const early = check(open, 3, open.retryAt! - 1);
    expect(early).toMatchObject({ pass: 0, waitUntil: open.retryAt, breaker: { state: "open", held: 3 } });
    const probe = check(early.breaker, 3, open.retryAt!);
    expect(probe).toMatchObject({ pass: 1, waitUntil: open.retryAt! + PROBE_LEASE_MS, breaker: { state: "half_open" } });
    expect(check(probe.breaker, 1, open.retryAt! + 1)).toMatchObject({ pass: 0 });
    // A probe that never reports is replaced once its lease is over.
    expect(check(probe.breaker, 1, open.retryAt! + PROBE_LEASE_MS)).toMatchObject({ pass: 1 });
  });

  it("half-open: the probe's success closes it; its failure opens it for twice as long, capped", () => {
    const open = failTimes(FAILURES_TO_OPEN);
    const half = check(open, 1, open.retryAt!).breaker;
    expect(record(half, true, open.retryAt! + 5)).toEqual(closedBreaker(ORIGIN));
    const reopened = record(half, false, open.retryAt! + 5);
    expect(reopened).toMatchObject({ state: "open", cooldownMs: 2 * BASE_COOLDOWN_MS, retryAt: open.retryAt! + 5 + 2 * BASE_COOLDOWN_MS });
    let b = reopened;
    for (let i = 0; i < 20; i++) b = record(check(b, 1, b.retryAt!).breaker, false, b.retryAt!);
    expect(b.cooldownMs).toBe(MAX_COOLDOWN_MS);
  });

  it("closed with no failures: checks and successes change nothing (nothing to write)", () => {
    const b = closedBreaker(ORIGIN);
    expect(check(b, 10, 0).breaker).toBe(b);
    expect(record(b, true, 0)).toBe(b);
    expect(record(b, null, 0)).toBe(b);
  });

  it("what counts as a failure: the origin down or overloaded, not a request it refused", () => {
    expect([500, 503, 429, 408, null].map((s) => countsAsFailure(s, false))).toEqual([true, true, true, true, true]);
    expect([400, 404, 410].map((s) => countsAsFailure(s, false))).toEqual([false, false, false]);
    expect(countsAsFailure(null, true)).toBe(false);
  });
});
