import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { armFault, disarmFault } from "../../src/faults";
import { SIGN_IN_RULE } from "../../src/gate/failure-budget";
import { addressName, THROTTLE_OBJECTS, throttleObjectOf } from "../../src/gate/sign-in-names";
import { MAX_BUDGETS } from "../../src/gate/sign-in-throttle";
import { signInStub } from "../../src/stubs";
import { api, createTenant, TOKEN } from "./helpers";

/**
 * Failed sign-ins are throttled per client address (IPv6 by /64) and per key prefix
 * (docs/security.md): a flood of wrong credentials is answered 429 with Retry-After after a few,
 * and counted in the metrics, while a valid credential from the same address or with the same
 * prefix still passes. The budgets are kept by a fixed set of objects, each holding a bounded number.
 */

const as = (address: string, token: string, path = "/v1/jobs") =>
  api(path, { headers: { Authorization: `Bearer ${token}`, "CF-Connecting-IP": address } });

const randomKey = () =>
  `ek_${Array.from(crypto.getRandomValues(new Uint8Array(36)), (b) => "0123456789abcdefghijklmnopqrstuvwxyz"[b % 36]).join("")}`;

async function refusals() {
  return signInStub(env, "totals").totals();
}

describe("failed sign-ins", () => {
  it("1,000 wrong keys from one address: as many are told 401 as the budget and what it earned back allow, the rest 429 with Retry-After", async () => {
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
    // However long the flood took on this machine: what the budget earned back meanwhile is allowed for below.
    const elapsed = Date.now() - started;
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

  it("a flood of junk from one address, then a valid key and the admin token from that same address answer 200", async () => {
    const tenant = await createTenant();
    for (let i = 0; i < SIGN_IN_RULE.capacity + 10; i++) await (await as("203.0.113.8", randomKey())).body?.cancel();
    expect((await as("203.0.113.8", randomKey())).status).toBe(429);
    expect((await as("203.0.113.8", tenant.apiKey)).status).toBe(200);
    expect((await as("203.0.113.8", TOKEN, "/v1/tenants")).status).toBe(200);
    // Every Worker calling from Cloudflare shares one address: its junk is throttled together,
    // its valid keys are not.
    expect((await as("203.0.113.8", "junk-token")).status).toBe(429);
  });

  it("25 junk keys with a victim's prefix, then the victim's real key answers 200", async () => {
    const victim = await createTenant();
    const prefix = victim.apiKey.slice(0, 7);
    const statuses: number[] = [];
    for (let i = 0; i < SIGN_IN_RULE.capacity + 5; i++) {
      const res = await as(`198.18.41.${i + 1}`, `${prefix}${randomKey().slice(prefix.length)}`);
      statuses.push(res.status);
      await res.body?.cancel();
    }
    expect(statuses.slice(SIGN_IN_RULE.capacity).every((s) => s === 429)).toBe(true);
    expect((await as("198.18.41.200", victim.apiKey)).status).toBe(200);
    expect((await as(`198.18.41.${SIGN_IN_RULE.capacity + 1}`, victim.apiKey)).status).toBe(200);
    expect((await victim.api("/v1/jobs")).status).toBe(200);
  });

  it("a throttled client's junk is still refused cheaply: a token not of a key's form, or a key already found wrong, without D1", async () => {
    const known = randomKey();
    expect((await as("203.0.113.11", known)).status).toBe(401);
    for (let i = 0; i < SIGN_IN_RULE.capacity; i++) await (await as("203.0.113.11", "junk-token")).body?.cancel();
    // With D1 failing, a request that reached it would be 503: 429 says none was made.
    armFault("catalog.unavailable");
    try {
      expect((await as("203.0.113.11", "junk-token")).status).toBe(429);
      expect((await as("203.0.113.11", known)).status).toBe(429);
      // A key never looked up might be valid: it is looked up, never refused unseen.
      expect((await as("203.0.113.11", randomKey())).status).toBe(503);
    } finally {
      disarmFault("catalog.unavailable");
    }
  });

  it("20 addresses in one IPv6 /64 are throttled together; IPv4-mapped IPv6 counts as its IPv4 address", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < SIGN_IN_RULE.capacity + 5; i++) {
      const res = await as(`2001:db8:41:3:${(i + 1).toString(16)}::${(i * 7 + 1).toString(16)}`, "junk-token");
      statuses.push(res.status);
      await res.body?.cancel();
    }
    expect(statuses.slice(0, SIGN_IN_RULE.capacity).every((s) => s === 401)).toBe(true);
    expect(statuses.slice(SIGN_IN_RULE.capacity).every((s) => s === 429)).toBe(true);
    expect((await as("2001:0db8:0041:0003:ffff:ffff:ffff:ffff", "junk-token")).status).toBe(429);
    expect((await as("2001:db8:41:4::1", "junk-token")).status).toBe(401);

    for (let i = 0; i < SIGN_IN_RULE.capacity; i++) await (await as("::ffff:203.0.113.12", "junk-token")).body?.cancel();
    expect((await as("203.0.113.12", "junk-token")).status).toBe(429);
  });

  it("guesses of one key prefix are throttled whatever address they come from", async () => {
    const prefix = "ek_zq9w";
    const guess = () => `${prefix}${randomKey().slice(prefix.length)}`;
    const statuses: number[] = [];
    for (let i = 0; i < SIGN_IN_RULE.capacity + 5; i++) statuses.push((await as(`198.51.100.${i + 1}`, guess())).status);
    expect(statuses.slice(0, SIGN_IN_RULE.capacity).every((s) => s === 401)).toBe(true);
    expect(statuses.slice(SIGN_IN_RULE.capacity).every((s) => s === 429)).toBe(true);
  });

  it("failures from 200 addresses are kept by the fixed set of throttle objects, one budget each", async () => {
    const held = async () => {
      const counts = await Promise.all(Array.from({ length: THROTTLE_OBJECTS }, (_, i) => signInStub(env, `throttle-${i}`).held()));
      return counts.reduce((a, b) => a + b, 0);
    };
    const before = await held();
    const addresses = Array.from({ length: 200 }, (_, i) => `100.64.41.${i}`);
    for (const address of addresses) await (await as(address, "junk-token")).body?.cancel();
    expect(await held()).toBe(before + addresses.length);
    // A throttled address's budget is in the object its name hashes to.
    for (let i = 0; i < SIGN_IN_RULE.capacity; i++) await (await as(addresses[0]!, "junk-token")).body?.cancel();
    const name = addressName(addresses[0]!);
    expect(await signInStub(env, throttleObjectOf(name)).wait(name)).toBeGreaterThan(0);
  });

  it("a throttle object holds at most MAX_BUDGETS budgets, forgiving the least recently failed", async () => {
    const object = signInStub(env, "throttle-bound-test");
    for (let i = 0; i <= SIGN_IN_RULE.capacity; i++) await object.fail("address:oldest");
    expect(await object.wait("address:oldest")).toBeGreaterThan(0);
    const names = Array.from({ length: MAX_BUDGETS }, (_, i) => `address:bound-${i}`);
    for (let i = 0; i < names.length; i += 256) await Promise.all(names.slice(i, i + 256).map((n) => object.fail(n)));
    expect(await object.held()).toBe(MAX_BUDGETS);
    expect(await object.wait("address:oldest")).toBe(0);
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
