import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { armFault, disarmFault } from "../../src/faults";
import { SIGN_IN_RULE } from "../../src/gate/failure-budget";
import { signInStub } from "../../src/stubs";
import { api, createTenant } from "./helpers";

/**
 * Failed sign-ins are throttled per client address and per key prefix (docs/security.md): a
 * flood of wrong credentials is answered 429 with Retry-After after a few, without a D1 query,
 * and counted in the metrics.
 */

const as = (address: string, token: string, path = "/v1/jobs") =>
  api(path, { headers: { Authorization: `Bearer ${token}`, "CF-Connecting-IP": address } });

const randomKey = () =>
  `ek_${Array.from(crypto.getRandomValues(new Uint8Array(36)), (b) => "0123456789abcdefghijklmnopqrstuvwxyz"[b % 36]).join("")}`;

async function refusals() {
  return signInStub(env, "totals").totals();
}

describe("failed sign-ins", () => {
  it("1,000 wrong keys from one address in a minute: a few are told 401, the rest 429 with Retry-After", async () => {
    const before = await refusals();
    const statuses: number[] = [];
    let retryAfter: string | null = null;
    const started = Date.now();
    for (let i = 0; i < 1_000; i++) {
      const res = await as("203.0.113.7", randomKey());
      statuses.push(res.status);
      if (res.status === 429) {
        retryAfter = res.headers.get("Retry-After");
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe("sign_in_throttled");
      } else await res.body?.cancel();
    }
    const elapsed = Date.now() - started;
    expect(elapsed).toBeLessThan(SIGN_IN_RULE.periodMs);
    const unauthorized = statuses.filter((s) => s === 401).length;
    const throttled = statuses.filter((s) => s === 429).length;
    // The budget, and what it earned back while the flood went on (capacity per period).
    const earned = Math.ceil((elapsed / SIGN_IN_RULE.periodMs) * SIGN_IN_RULE.capacity);
    expect(unauthorized).toBeGreaterThanOrEqual(SIGN_IN_RULE.capacity);
    expect(unauthorized).toBeLessThanOrEqual(SIGN_IN_RULE.capacity + earned);
    expect(throttled).toBe(1_000 - unauthorized);
    expect(statuses.slice(0, SIGN_IN_RULE.capacity).every((s) => s === 401)).toBe(true);
    expect(Number(retryAfter)).toBeGreaterThan(0);
    expect(Number(retryAfter)).toBeLessThanOrEqual(2 * (SIGN_IN_RULE.periodMs / 1000) + 1);
    // Counted, for the admin's metrics (asynchronously: after each answer).
    await expect
      .poll(async () => {
        const after = await refusals();
        return { invalid: after.invalid - before.invalid, throttled: after.throttled - before.throttled };
      })
      .toEqual({ invalid: unauthorized, throttled });
  });

  it("a throttled address is refused before any D1 query, even with a good key; another address is not", async () => {
    const tenant = await createTenant();
    for (let i = 0; i < SIGN_IN_RULE.capacity; i++) expect((await as("203.0.113.8", "junk-token")).status).toBe(401);
    // With D1 failing, a request that reached it would be 503: 429 says none was made.
    armFault("catalog.unavailable");
    try {
      const res = await as("203.0.113.8", tenant.apiKey);
      expect(res.status).toBe(429);
      expect(res.headers.get("Retry-After")).toMatch(/^[1-9][0-9]*$/);
    } finally {
      disarmFault("catalog.unavailable");
    }
    expect((await as("203.0.113.9", tenant.apiKey)).status).toBe(200);
  });

  it("guesses of one key prefix are throttled whatever address they come from", async () => {
    const prefix = "ek_zq9w";
    const guess = () => `${prefix}${randomKey().slice(prefix.length)}`;
    const statuses: number[] = [];
    for (let i = 0; i < SIGN_IN_RULE.capacity + 5; i++) statuses.push((await as(`198.51.100.${i + 1}`, guess())).status);
    expect(statuses.slice(0, SIGN_IN_RULE.capacity).every((s) => s === 401)).toBe(true);
    expect(statuses.slice(SIGN_IN_RULE.capacity).every((s) => s === 429)).toBe(true);
  });

  it("refusal counts reach the admin's Prometheus metrics", async () => {
    await as("203.0.113.10", "wrong");
    await expect
      .poll(async () => {
        const text = await (await api("/metrics")).text();
        return /edgecron_sign_in_refusals_total\{reason="invalid"\} [1-9]/.test(text);
      })
      .toBe(true);
  });
});
