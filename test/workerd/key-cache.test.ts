import { env } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { KEY_CACHE_MS } from "../../src/app/key-cache";
import { api, createTenant } from "./helpers";

/**
 * API keys found live are remembered by the isolate for KEY_CACHE_MS (src/app/key-cache.ts,
 * docs/security.md): a tenant's steady requests read no D1 row to authenticate, a revocation or
 * a change of the tenant through this isolate holds here at once, and one made elsewhere within
 * KEY_CACHE_MS. Every request here goes to this test's one isolate.
 */

type RouteCost = { calls: number; rowsRead: number };

/** D1 rows the Worker's cost meter counted for `route`, and its calls. */
async function costOf(route: string): Promise<RouteCost> {
  const res = await api("/v1/metrics?window=1h");
  const ops = ((await res.json()) as { cost: { workerOperations: Record<string, RouteCost> } }).cost.workerOperations;
  return ops[route] ?? { calls: 0, rowsRead: 0 };
}

/** The D1 rows read by one call of `route` made by `call`, once the meter holds it. */
async function rowsReadBy(route: string, call: () => Promise<Response>): Promise<number> {
  const before = await costOf(route);
  const res = await call();
  expect(res.status, await res.clone().text()).toBe(200);
  return vi.waitFor(
    async () => {
      const after = await costOf(route);
      expect(after.calls - before.calls).toBe(1);
      return after.rowsRead - before.rowsRead;
    },
    { timeout: 15_000, interval: 200 },
  );
}

type Tenant = Awaited<ReturnType<typeof createTenant>>;

/** A key of `t` with every scope, made by `t`'s first key, and a function calling the API with it. */
async function anotherKey(t: Tenant) {
  const res = await t.api(`/v1/tenants/${t.id}/keys`, { method: "POST", json: { scopes: ["admin"] } });
  expect(res.status, await res.clone().text()).toBe(201);
  const key = (await res.json()) as { id: string; apiKey: string };
  const call = (path: string, init: RequestInit & { json?: unknown } = {}) =>
    api(path, { ...init, headers: { ...Object.fromEntries(new Headers(init.headers)), Authorization: `Bearer ${key.apiKey}` } });
  return { ...key, api: call };
}

describe("API keys remembered by the isolate", () => {
  it("a key's first request reads it from D1; its next reads no D1 row at all", async () => {
    const t = await createTenant();
    const me = () => t.api("/v1/me");
    expect(await rowsReadBy("GET /v1/me", me)).toBeGreaterThan(0);
    expect(await rowsReadBy("GET /v1/me", me)).toBe(0);
    expect(await rowsReadBy("GET /v1/me", me)).toBe(0);
  });

  it("a key revoked through the API is refused at once, though it was remembered; the keys not revoked still work", async () => {
    const t = await createTenant();
    const other = await anotherKey(t);
    expect((await other.api("/v1/me")).status).toBe(200);
    expect((await t.api("/v1/me")).status).toBe(200);

    expect((await t.api(`/v1/tenants/${t.id}/keys/${other.id}`, { method: "DELETE" })).status).toBe(200);
    const refused = await other.api("/v1/me");
    expect(refused.status, await refused.clone().text()).toBe(401);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("unauthorized");
    expect((await t.api("/v1/me")).status).toBe(200);
  });

  it("the keys revoked with it (those it made) are refused at once too", async () => {
    const t = await createTenant();
    const maker = await anotherKey(t);
    const made = await anotherKey({ ...t, api: maker.api });
    expect((await made.api("/v1/me")).status).toBe(200);

    expect((await t.api(`/v1/tenants/${t.id}/keys/${maker.id}`, { method: "DELETE" })).status).toBe(200);
    expect((await made.api("/v1/me")).status).toBe(401);
    expect((await maker.api("/v1/me")).status).toBe(401);
  });

  it("a key revoked elsewhere (another isolate, here D1 itself) passes here at most KEY_CACHE_MS more, then is refused", async () => {
    const t = await createTenant();
    const other = await anotherKey(t);
    expect((await other.api("/v1/me")).status).toBe(200);
    await env.DB.prepare("UPDATE api_keys SET revoked_at = ? WHERE id = ?").bind(Date.now(), other.id).run();
    // Remembered: what another isolate's revocation costs is this delay, which docs/security.md states.
    expect((await other.api("/v1/me")).status).toBe(200);
    await vi.waitFor(async () => expect((await other.api("/v1/me")).status).toBe(401), { timeout: KEY_CACHE_MS + 15_000, interval: 250 });
  });

  it("a tenant's limits changed through the API hold at once for its remembered keys", async () => {
    const t = await createTenant({ requestsPerSecond: 1 });
    expect((await t.api("/v1/me")).status).toBe(200);
    const changed = await api(`/v1/tenants/${t.id}`, { method: "PATCH", json: { limits: { requestsPerSecond: null } } });
    expect(changed.status, await changed.clone().text()).toBe(200);
    // A burst over the old rate: none is refused under the new limit (none).
    const answers = await Promise.all(Array.from({ length: 10 }, () => t.api("/v1/me")));
    expect(answers.map((r) => r.status)).toEqual(Array(10).fill(200));
  });
});
