import { env, SELF } from "cloudflare:test";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { forgetAllKeys } from "../../src/app/key-cache";
import { insertKey, revokeKeys } from "../../src/catalog/tenants";
import type { Job } from "../../src/model/job";
import type { Run } from "../../src/model/run";
import { api, createJob, createTenant, FAR_CRON, fireNow, getRun, hitsOf, listRuns, receiverPath, TOKEN, waitForRun } from "./helpers";

type Tenant = Awaited<ReturnType<typeof createTenant>>;
type Call = Tenant["api"];
type Page<T> = { items: T[]; nextCursor: string | null };
type ErrorBody = { error: { code: string; message: string; issues?: unknown } };
type KeyView = { id: string; prefix: string; createdAt: string; revokedAt: string | null; createdBy: string | null };
type NewKey = KeyView & { apiKey: string };
type AuditPage = { items: Array<{ actor: string; action: string; subject: string; change: { before: unknown; after: unknown } }> };

const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";
function randomChars(n: number): string {
  return Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => ALPHABET[b % ALPHABET.length]).join("");
}
/** Well-formed ids that name nothing. */
const unknownJobId = () => `job_${randomChars(19)}`;
const unknownRunId = () => `run_${randomChars(19)}_${Date.now().toString(36)}`;
const unknownTenantId = () => `ten_${randomChars(20)}`;
const unknownKeyId = () => `key_${randomChars(20)}`;

async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Calls the API with an arbitrary Authorization header (or none). */
function withAuth(authorization: string | null, path: string, init: RequestInit & { json?: unknown } = {}) {
  if (authorization === null) return SELF.fetch(`https://edgecron.test${path}`, init);
  const headers = new Headers(init.headers);
  headers.set("Authorization", authorization);
  return api(path, { ...init, headers });
}
const asKey =
  (key: string) =>
  (path: string, init: RequestInit & { json?: unknown } = {}) =>
    withAuth(`Bearer ${key}`, path, init);

async function expectError(res: Response, status: number, code: string): Promise<ErrorBody> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  expect(res.headers.get("Content-Type") ?? "").toMatch(/^application\/json/);
  const body = JSON.parse(text) as ErrorBody;
  expect(body).toMatchObject({ error: { code, message: expect.any(String) } });
  return body;
}

async function jsonOf<T>(res: Response, status = 200): Promise<T> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  return JSON.parse(text) as T;
}

async function allJobs(call: Call): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  do {
    const page: Page<Job> = await jsonOf(await call(`/v1/jobs?limit=200${cursor ? `&cursor=${cursor}` : ""}`));
    ids.push(...page.items.map((j) => j.id));
    cursor = page.nextCursor;
  } while (cursor);
  return ids;
}

async function liveJobsInD1(tenantId: string): Promise<number> {
  return (await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = ? AND deleted_at IS NULL")
    .bind(tenantId)
    .first<{ n: number }>())!.n;
}

// ---------------------------------------------------------------------------------------------

describe("tenants and API keys", () => {
  it("POST /v1/tenants (admin) → 201 with id, apiKey, keyId and limits; the key works as a Bearer token", async () => {
    const res = await api("/v1/tenants", { method: "POST", json: { name: "acme", limits: { maxJobs: 5 } } });
    const t = await jsonOf<Record<string, any>>(res, 201);
    expect(t).toMatchObject({
      id: expect.stringMatching(/^ten_[0-9a-z]{20}$/),
      name: "acme",
      apiKey: expect.stringMatching(/^ek_/),
      keyId: expect.stringMatching(/^key_[0-9a-z]{20}$/),
      createdAt: expect.any(String),
      limits: { maxJobs: 5 },
    });
    for (const limit of ["maxRunsInFlight", "requestsPerSecond"]) expect(t.limits).toHaveProperty(limit);

    const call = asKey(t.apiKey);
    expect(await jsonOf(await call(`/v1/tenants/${t.id}`))).toMatchObject({ id: t.id, name: "acme", limits: { maxJobs: 5 } });
    expect(await jsonOf(await call("/v1/jobs"))).toEqual({ items: [], nextCursor: null });
  });

  it("keys are stored only as their SHA-256: no column of api_keys holds the key", async () => {
    const t = await createTenant();
    const extra = await jsonOf<KeyView & { apiKey: string }>(await t.api(`/v1/tenants/${t.id}/keys`, { method: "POST" }), 201);
    const { results } = await env.DB.prepare("SELECT * FROM api_keys").all<Record<string, unknown>>();
    expect(results.length).toBeGreaterThanOrEqual(2);
    for (const key of [t.apiKey, extra.apiKey]) {
      for (const row of results) for (const value of Object.values(row)) expect(String(value)).not.toContain(key);
    }
    const mine = await env.DB.prepare("SELECT * FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id")
      .bind(t.id)
      .all<Record<string, unknown>>();
    const byId = new Map(mine.results.map((r) => [r.id as string, r]));
    expect(byId.get(t.keyId)!.hash).toBe(await sha256Hex(t.apiKey));
    expect(byId.get(extra.id)!.hash).toBe(await sha256Hex(extra.apiKey));
    // Nor is it anywhere in the tenant's own row.
    const tenantRow = await env.DB.prepare("SELECT * FROM tenants WHERE id = ?").bind(t.id).first<Record<string, unknown>>();
    for (const value of Object.values(tenantRow!)) expect(String(value)).not.toContain(t.apiKey);
  });

  it("a tenant key may not create, list or change tenants (403 JSON); the admin may", async () => {
    const t = await createTenant({ maxJobs: 7 });
    await expectError(await t.api("/v1/tenants", { method: "POST", json: { name: "sneaky" } }), 403, "forbidden");
    await expectError(await t.api("/v1/tenants"), 403, "forbidden");
    await expectError(await t.api(`/v1/tenants/${t.id}`, { method: "PATCH", json: { limits: { maxJobs: 1_000_000 } } }), 403, "forbidden");
    expect(await jsonOf(await t.api(`/v1/tenants/${t.id}`))).toMatchObject({ limits: { maxJobs: 7 } });

    expect(await jsonOf(await api(`/v1/tenants/${t.id}`, { method: "PATCH", json: { limits: { maxJobs: 8 } } }))).toMatchObject({
      id: t.id,
      limits: { maxJobs: 8 },
    });
    const listed: string[] = [];
    let cursor: string | null = null;
    do {
      const page: Page<{ id: string }> = await jsonOf(await api(`/v1/tenants?limit=200${cursor ? `&cursor=${cursor}` : ""}`));
      listed.push(...page.items.map((x) => x.id));
      cursor = page.nextCursor;
    } while (cursor);
    expect(listed).toContain(t.id);
  });

  it("rotation without downtime: add a key, list keys without key material, revoke the old one", async () => {
    const t = await createTenant();
    // The successor does all the first key did (a new key is read-only unless asked).
    const added = await jsonOf<KeyView & { apiKey: string }>(
      await t.api(`/v1/tenants/${t.id}/keys`, { method: "POST", json: { scopes: ["admin"] } }),
      201,
    );
    expect(added).toMatchObject({
      id: expect.stringMatching(/^key_[0-9a-z]{20}$/),
      apiKey: expect.stringMatching(/^ek_/),
      revokedAt: null,
    });
    expect(added.apiKey.startsWith(added.prefix)).toBe(true);
    expect(added.apiKey).not.toBe(t.apiKey);
    const second = asKey(added.apiKey);
    expect(await jsonOf(await second(`/v1/tenants/${t.id}`))).toMatchObject({ id: t.id });

    const listRes = await t.api(`/v1/tenants/${t.id}/keys`);
    const listText = await listRes.clone().text();
    const keys = (await jsonOf<{ items: KeyView[] }>(listRes)).items;
    expect(keys.map((k) => k.id).sort()).toEqual([t.keyId, added.id].sort());
    for (const k of keys) {
      expect(Object.keys(k).sort()).toEqual(["createdAt", "createdBy", "id", "jobPrefix", "prefix", "revokedAt", "scopes"]);
      expect(k.revokedAt).toBeNull();
    }
    expect(listText).not.toContain(t.apiKey);
    expect(listText).not.toContain(added.apiKey);

    // Revoke the first key with the second, which it made: the first stops at once, the second
    // goes on (a key is never revoked with a key it revokes).
    expect(await jsonOf(await second(`/v1/tenants/${t.id}/keys/${t.keyId}`, { method: "DELETE" }))).toEqual({
      id: t.keyId,
      revoked: true,
      alsoRevoked: [],
    });
    await expectError(await t.api(`/v1/jobs`), 401, "unauthorized");
    expect((await second(`/v1/jobs`)).status).toBe(200);
    const after = (await jsonOf<{ items: KeyView[] }>(await second(`/v1/tenants/${t.id}/keys`))).items;
    expect(after.find((k) => k.id === t.keyId)!.revokedAt).toEqual(expect.any(String));
    expect(after.find((k) => k.id === added.id)!.revokedAt).toBeNull();
    expect(after.find((k) => k.id === added.id)!.createdBy).toBe(t.keyId);

    // The tenant may not revoke its own last live key…
    await expectError(await second(`/v1/tenants/${t.id}/keys/${added.id}`, { method: "DELETE" }), 409, "last_key");
    expect((await second(`/v1/jobs`)).status).toBe(200);
    // …the admin may.
    expect(await jsonOf(await api(`/v1/tenants/${t.id}/keys/${added.id}`, { method: "DELETE" }))).toEqual({
      id: added.id,
      revoked: true,
      alsoRevoked: [],
    });
    await expectError(await second(`/v1/jobs`), 401, "unauthorized");
  });

  it("two concurrent revokes of a tenant's last two keys: exactly one succeeds, one key stays live", async () => {
    const t = await createTenant();
    const added = await jsonOf<{ id: string; apiKey: string }>(
      await t.api(`/v1/tenants/${t.id}/keys`, { method: "POST", json: { scopes: ["admin"] } }),
      201,
    );
    const second = asKey(added.apiKey);
    const answers = await Promise.all([
      t.api(`/v1/tenants/${t.id}/keys/${added.id}`, { method: "DELETE" }),
      second(`/v1/tenants/${t.id}/keys/${t.keyId}`, { method: "DELETE" }),
    ]);
    expect(answers.map((r) => r.status).sort()).toEqual([200, 409]);
    const live = await env.DB.prepare("SELECT COUNT(*) AS n FROM api_keys WHERE tenant_id = ? AND revoked_at IS NULL")
      .bind(t.id)
      .first<{ n: number }>();
    expect(live!.n).toBe(1);
    const works = await Promise.all([t.api("/v1/jobs"), second("/v1/jobs")]);
    expect(works.map((r) => r.status).sort()).toEqual([200, 401]);
  });

  it("unknown or malformed key and tenant ids → 404", async () => {
    const t = await createTenant();
    for (const keyId of [unknownKeyId(), "nope", "key_TOO-SHORT", `${t.keyId}x`]) {
      await expectError(await t.api(`/v1/tenants/${t.id}/keys/${keyId}`, { method: "DELETE" }), 404, "not_found");
      await expectError(await api(`/v1/tenants/${t.id}/keys/${keyId}`, { method: "DELETE" }), 404, "not_found");
    }
    for (const id of [unknownTenantId(), "nope"]) {
      await expectError(await api(`/v1/tenants/${id}`), 404, "not_found");
      await expectError(await api(`/v1/tenants/${id}/keys`), 404, "not_found");
      await expectError(await api(`/v1/tenants/${id}/keys`, { method: "POST" }), 404, "not_found");
    }
    // The key is untouched by all that.
    expect((await t.api(`/v1/jobs`)).status).toBe(200);
  });
});

// ---------------------------------------------------------------------------------------------

/** Makes a key of `t` with `call` (a key of it, or the admin token's `api`). */
async function mintWith(call: Call, t: Tenant, scopes: string[] = ["admin"]): Promise<NewKey> {
  return jsonOf<NewKey>(await call(`/v1/tenants/${t.id}/keys`, { method: "POST", json: { scopes } }), 201);
}

async function keysOf(t: Tenant): Promise<Map<string, KeyView>> {
  const { items } = await jsonOf<{ items: KeyView[] }>(await api(`/v1/tenants/${t.id}/keys`));
  return new Map(items.map((k) => [k.id, k]));
}

const revokeEntriesOf = async (t: Tenant) => (await jsonOf<AuditPage>(await api(`/v1/audit?tenantId=${t.id}&action=key.revoke`))).items;

/** Whether each key still signs in: 200 or 401 on a route any key may call. */
async function signsIn(...keys: string[]): Promise<number[]> {
  return Promise.all(keys.map(async (key) => (await asKey(key)("/v1/me")).status));
}

describe("keys made by a key", () => {
  it("a key records the key that made it; the admin token's and the tenant's first key have none", async () => {
    const t = await createTenant();
    const byAdmin = await mintWith(api, t);
    const byTenant = await mintWith(t.api, t, ["read"]);
    expect(byAdmin.createdBy).toBeNull();
    expect(byTenant.createdBy).toBe(t.keyId);
    const listed = await keysOf(t);
    expect([t.keyId, byAdmin.id, byTenant.id].map((id) => listed.get(id)?.createdBy)).toEqual([null, null, t.keyId]);
    // A key the admin made makes keys of its own, which name it.
    const grandchild = await mintWith(asKey(byAdmin.apiKey), t, ["write"]);
    expect((await keysOf(t)).get(grandchild.id)!.createdBy).toBe(byAdmin.id);
  });

  it("revoking a key revokes the keys it made and theirs, at once, each with its own audit entry", async () => {
    const t = await createTenant();
    const a = await mintWith(t.api, t);
    const b = await mintWith(asKey(a.apiKey), t);
    const c = await mintWith(asKey(b.apiKey), t, ["read"]);
    // Made by the tenant's first key, beside A: not A's to take along.
    const sibling = await mintWith(t.api, t, ["read"]);
    expect(await signsIn(a.apiKey, b.apiKey, c.apiKey, sibling.apiKey)).toEqual([200, 200, 200, 200]);

    const answer = await jsonOf(await t.api(`/v1/tenants/${t.id}/keys/${a.id}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: a.id, revoked: true, alsoRevoked: [b.id, c.id] });
    expect(await signsIn(a.apiKey, b.apiKey, c.apiKey, sibling.apiKey, t.apiKey)).toEqual([401, 401, 401, 200, 200]);

    const keys = await keysOf(t);
    const revokedAt = keys.get(a.id)!.revokedAt;
    expect(revokedAt).toEqual(expect.any(String));
    expect([b.id, c.id].map((id) => keys.get(id)!.revokedAt)).toEqual([revokedAt, revokedAt]);
    expect([t.keyId, sibling.id].map((id) => keys.get(id)!.revokedAt)).toEqual([null, null]);

    const entries = await revokeEntriesOf(t);
    expect(entries.map((e) => e.subject).sort()).toEqual([a.id, b.id, c.id].sort());
    for (const e of entries) expect(e.actor).toBe(t.keyId);
    const bySubject = new Map(entries.map((e) => [e.subject, e.change]));
    expect(bySubject.get(a.id)!.after).toEqual({ revokedAt: Date.parse(revokedAt!) });
    expect(bySubject.get(b.id)).toMatchObject({ before: { id: b.id, createdBy: a.id }, after: { revokedWith: a.id } });
    expect(bySubject.get(c.id)).toMatchObject({ before: { id: c.id, createdBy: b.id, scopes: ["read"] }, after: { revokedWith: a.id } });

    // Revoking a revoked key again changes nothing and records nothing.
    expect(await jsonOf(await t.api(`/v1/tenants/${t.id}/keys/${a.id}`, { method: "DELETE" }))).toEqual({
      id: a.id,
      revoked: true,
      alsoRevoked: [],
    });
    expect(await revokeEntriesOf(t)).toHaveLength(3);
  });

  it("revoking a key takes the keys it made, not its maker", async () => {
    const t = await createTenant();
    const a = await mintWith(t.api, t);
    const b = await mintWith(asKey(a.apiKey), t);
    const c = await mintWith(asKey(b.apiKey), t);
    const answer = await jsonOf(await asKey(a.apiKey)(`/v1/tenants/${t.id}/keys/${b.id}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: b.id, revoked: true, alsoRevoked: [c.id] });
    expect(await signsIn(a.apiKey, b.apiKey, c.apiKey, t.apiKey)).toEqual([200, 401, 401, 200]);
    // A still does what an admin key does.
    expect((await mintWith(asKey(a.apiKey), t, ["read"])).createdBy).toBe(a.id);
    expect((await revokeEntriesOf(t)).map((e) => e.subject).sort()).toEqual([b.id, c.id].sort());
  });

  /** K, made by the tenant's first key; K made K1 (its successor) and K2 (a key minted with K once it leaked, say); K1 made K1a. All admin keys. */
  async function family() {
    const t = await createTenant();
    const k = await mintWith(t.api, t);
    const k1 = await mintWith(asKey(k.apiKey), t);
    const k2 = await mintWith(asKey(k.apiKey), t);
    const k1a = await mintWith(asKey(k1.apiKey), t);
    expect(await signsIn(t.apiKey, k.apiKey, k1.apiKey, k2.apiKey, k1a.apiKey)).toEqual([200, 200, 200, 200, 200]);
    return { t, k, k1, k2, k1a };
  }

  it("a key revoking the key that made it is spared, and so are the keys it made; the rest of the line goes", async () => {
    const { t, k, k1, k2, k1a } = await family();
    const answer = await jsonOf(await asKey(k1.apiKey)(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: k.id, revoked: true, alsoRevoked: [k2.id] });
    expect(await signsIn(k.apiKey, k2.apiKey, k1.apiKey, k1a.apiKey, t.apiKey)).toEqual([401, 401, 200, 200, 200]);
    const keys = await keysOf(t);
    expect([k1.id, k1a.id].map((id) => keys.get(id)!.revokedAt)).toEqual([null, null]);

    const entries = await revokeEntriesOf(t);
    expect(entries.map((e) => e.subject).sort()).toEqual([k.id, k2.id].sort());
    for (const e of entries) expect(e.actor).toBe(k1.id);
    expect(entries.find((e) => e.subject === k2.id)!.change.after).toMatchObject({ revokedWith: k.id });
    // The spared key goes on doing what an admin key does, its own key too.
    expect((await mintWith(asKey(k1.apiKey), t, ["read"])).createdBy).toBe(k1.id);
    expect((await asKey(k1a.apiKey)("/v1/jobs")).status).toBe(200);
  });

  it("the key spared is the caller, however far below the revoked key: the keys between go", async () => {
    const { t, k, k1, k2, k1a } = await family();
    const answer = await jsonOf(await asKey(k1a.apiKey)(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: k.id, revoked: true, alsoRevoked: [k1.id, k2.id] });
    expect(await signsIn(k.apiKey, k1.apiKey, k2.apiKey, k1a.apiKey, t.apiKey)).toEqual([401, 401, 401, 200, 200]);
  });

  it("the admin token revokes a key's whole line: nothing is spared", async () => {
    const { t, k, k1, k2, k1a } = await family();
    const answer = await jsonOf(await api(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: k.id, revoked: true, alsoRevoked: [k1.id, k2.id, k1a.id] });
    expect(await signsIn(k.apiKey, k1.apiKey, k2.apiKey, k1a.apiKey, t.apiKey)).toEqual([401, 401, 401, 401, 200]);
    const entries = await revokeEntriesOf(t);
    expect(entries.map((e) => e.subject).sort()).toEqual([k.id, k1.id, k2.id, k1a.id].sort());
    for (const e of entries) expect(e.actor).toBe("admin");
  });

  it("a key outside the revoked key's line (one the admin token made) revokes its whole line", async () => {
    const { t, k, k1, k2, k1a } = await family();
    const k3 = await mintWith(api, t);
    const answer = await jsonOf(await asKey(k3.apiKey)(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: k.id, revoked: true, alsoRevoked: [k1.id, k2.id, k1a.id] });
    expect(await signsIn(k.apiKey, k1.apiKey, k2.apiKey, k1a.apiKey, k3.apiKey, t.apiKey)).toEqual([401, 401, 401, 401, 200, 200]);
  });

  it("a key revoking itself takes its whole line: nothing is spared", async () => {
    const { t, k, k1, k2, k1a } = await family();
    const answer = await jsonOf(await asKey(k.apiKey)(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: k.id, revoked: true, alsoRevoked: [k1.id, k2.id, k1a.id] });
    expect(await signsIn(k.apiKey, k1.apiKey, k2.apiKey, k1a.apiKey, t.apiKey)).toEqual([401, 401, 401, 401, 200]);
    for (const e of await revokeEntriesOf(t)) expect(e.actor).toBe(k.id);
  });

  it("the dodge: a leaked key L mints L2, L2 revokes L (spared then); the owner revoking L again takes L2", async () => {
    const t = await createTenant();
    const l = await mintWith(t.api, t);
    const l2 = await mintWith(asKey(l.apiKey), t);
    const l2a = await mintWith(asKey(l2.apiKey), t, ["read"]);
    expect(await jsonOf(await asKey(l2.apiKey)(`/v1/tenants/${t.id}/keys/${l.id}`, { method: "DELETE" }))).toEqual({
      id: l.id,
      revoked: true,
      alsoRevoked: [],
    });
    expect(await signsIn(l.apiKey, l2.apiKey, l2a.apiKey)).toEqual([401, 200, 200]);
    const revokedAt = (await keysOf(t)).get(l.id)!.revokedAt;

    // The owner, with a key outside L's line, revokes L: L stays as it was, its live line goes.
    const answer = await jsonOf(await t.api(`/v1/tenants/${t.id}/keys/${l.id}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: l.id, revoked: true, alsoRevoked: [l2.id, l2a.id] });
    expect(await signsIn(l.apiKey, l2.apiKey, l2a.apiKey, t.apiKey)).toEqual([401, 401, 401, 200]);
    expect((await keysOf(t)).get(l.id)!.revokedAt).toBe(revokedAt);
    const entries = await revokeEntriesOf(t);
    expect(entries.map((e) => `${e.actor} ${e.subject}`).sort()).toEqual(
      [`${l2.id} ${l.id}`, `${t.keyId} ${l2.id}`, `${t.keyId} ${l2a.id}`].sort(),
    );
    for (const e of entries.filter((e) => e.actor === t.keyId)) expect(e.change.after).toMatchObject({ revokedWith: l.id });
  });

  it("the dodge, with the admin token: revoking the revoked key takes the line its revoker was spared in", async () => {
    const t = await createTenant();
    const l = await mintWith(t.api, t);
    const l2 = await mintWith(asKey(l.apiKey), t);
    expect((await asKey(l2.apiKey)(`/v1/tenants/${t.id}/keys/${l.id}`, { method: "DELETE" })).status).toBe(200);
    expect(await jsonOf(await api(`/v1/tenants/${t.id}/keys/${l.id}`, { method: "DELETE" }))).toEqual({
      id: l.id,
      revoked: true,
      alsoRevoked: [l2.id],
    });
    expect(await signsIn(l2.apiKey, t.apiKey)).toEqual([401, 200]);
  });

  it("a key spared by revoking its maker is spared only from its own call: repeating it spares it again; the maker's maker takes it", async () => {
    const { t, k, k1, k2, k1a } = await family();
    // Rotation: K1, which K made, revokes K; repeated (a retry), it spares K1 again and revokes nothing.
    expect(await jsonOf(await asKey(k1.apiKey)(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }))).toEqual({
      id: k.id,
      revoked: true,
      alsoRevoked: [k2.id],
    });
    expect(await jsonOf(await asKey(k1.apiKey)(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }))).toEqual({
      id: k.id,
      revoked: true,
      alsoRevoked: [],
    });
    expect(await signsIn(k1.apiKey, k1a.apiKey)).toEqual([200, 200]);
    // K1a, below K1, revoking K again spares itself, not K1 (the keys between go).
    expect(await jsonOf(await asKey(k1a.apiKey)(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }))).toEqual({
      id: k.id,
      revoked: true,
      alsoRevoked: [k1.id],
    });
    expect(await signsIn(k.apiKey, k1.apiKey, k2.apiKey, k1a.apiKey, t.apiKey)).toEqual([401, 401, 401, 200, 200]);
    // The admin token, revoking K again, takes what is left of K's line; after that nothing more.
    expect(await jsonOf(await api(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }))).toEqual({
      id: k.id,
      revoked: true,
      alsoRevoked: [k1a.id],
    });
    expect(await jsonOf(await api(`/v1/tenants/${t.id}/keys/${k.id}`, { method: "DELETE" }))).toEqual({
      id: k.id,
      revoked: true,
      alsoRevoked: [],
    });
  });

  it("a key may not revoke itself with keys that would leave the tenant no live key: 409, nothing changes; the new key may revoke it", async () => {
    const t = await createTenant();
    // Every key the tenant has is in its first key's line.
    const a = await mintWith(t.api, t);
    const b = await mintWith(asKey(a.apiKey), t, ["read"]);
    const before = await keysOf(t);
    const refused = await expectError(await t.api(`/v1/tenants/${t.id}/keys/${t.keyId}`, { method: "DELETE" }), 409, "last_key");
    expect(refused.error.message).toContain("2 live key(s) it made");
    expect(await keysOf(t)).toEqual(before);
    expect(await signsIn(t.apiKey, a.apiKey, b.apiKey)).toEqual([200, 200, 200]);
    expect(await revokeEntriesOf(t)).toEqual([]);

    // A, which the first key made, revokes it: A and B, which A made, stay.
    const answer = await jsonOf(await asKey(a.apiKey)(`/v1/tenants/${t.id}/keys/${t.keyId}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: t.keyId, revoked: true, alsoRevoked: [] });
    expect(await signsIn(t.apiKey, a.apiKey, b.apiKey)).toEqual([401, 200, 200]);
    expect((await revokeEntriesOf(t)).map((e) => e.subject)).toEqual([t.keyId]);
  });

  it("the admin token may revoke a tenant's last live keys", async () => {
    const t = await createTenant();
    const a = await mintWith(t.api, t);
    const b = await mintWith(asKey(a.apiKey), t, ["read"]);
    const answer = await jsonOf(await api(`/v1/tenants/${t.id}/keys/${t.keyId}`, { method: "DELETE" }));
    expect(answer).toEqual({ id: t.keyId, revoked: true, alsoRevoked: [a.id, b.id] });
    expect(await signsIn(t.apiKey, a.apiKey, b.apiKey)).toEqual([401, 401, 401]);
    expect(await revokeEntriesOf(t)).toHaveLength(3);
  });

  it("a key whose line changed since it was read is not revoked: the revocation names every key it revokes", async () => {
    const t = await createTenant();
    const a = await mintWith(t.api, t);
    const b = await mintWith(asKey(a.apiKey), t);
    const before = await keysOf(t);
    // As a revocation that read A's line before B was made would write: A alone.
    expect(await revokeKeys(env.DB, t.id, a.id, [a.id], null, Date.now(), true)).toBe(false);
    expect(await keysOf(t)).toEqual(before);
    expect(await revokeKeys(env.DB, t.id, a.id, [a.id, b.id], null, Date.now(), true)).toBe(true);
    // Revoked in D1, not through the API: as an isolate that has not seen the keys tells.
    forgetAllKeys();
    expect(await signsIn(a.apiKey, b.apiKey, t.apiKey)).toEqual([401, 401, 200]);
  });

  it("the spared line is outside the comparison: keys it makes meanwhile do not change it, keys the rest makes do", async () => {
    const { t, k, k1, k2 } = await family();
    // K1's own keys (K1a, and one made since) are not in the line that spares K1…
    const late = await mintWith(asKey(k1.apiKey), t, ["read"]);
    // …but a key K2 made is: a revocation that read the line before it was made writes nothing.
    const k2a = await mintWith(asKey(k2.apiKey), t, ["read"]);
    const before = await keysOf(t);
    expect(await revokeKeys(env.DB, t.id, k.id, [k.id, k2.id], k1.id, Date.now(), true)).toBe(false);
    expect(await keysOf(t)).toEqual(before);
    expect(await revokeKeys(env.DB, t.id, k.id, [k.id, k2.id, k2a.id], k1.id, Date.now(), true)).toBe(true);
    forgetAllKeys();
    expect(await signsIn(k.apiKey, k2.apiKey, k2a.apiKey, k1.apiKey, late.apiKey)).toEqual([401, 401, 401, 200, 200]);
  });

  it("a key is not made once its maker is revoked, even by a request that signed in before", async () => {
    const t = await createTenant();
    const a = await mintWith(t.api, t);
    expect((await api(`/v1/tenants/${t.id}/keys/${a.id}`, { method: "DELETE" })).status).toBe(200);
    const late = { id: `key_${randomChars(20)}`, hash: await sha256Hex(`ek_${randomChars(36)}`), prefix: "ek_late" };
    const grant = { scopes: ["admin"] as const, jobPrefix: null };
    expect(await insertKey(env.DB, t.id, { ...late, ...grant, createdBy: a.id }, Date.now())).toBe(false);
    expect((await keysOf(t)).has(late.id)).toBe(false);
    // The same key from a live maker is made: the refusal is the maker's.
    expect(await insertKey(env.DB, t.id, { ...late, ...grant, createdBy: t.keyId }, Date.now())).toBe(true);
    expect((await keysOf(t)).get(late.id)!.createdBy).toBe(t.keyId);
  });
});

// ---------------------------------------------------------------------------------------------

describe("errors", () => {
  it.each([
    ["no Authorization header", null],
    ["empty Bearer", "Bearer "],
    ["not Bearer", "Basic dXNlcjpwYXNz"],
    ["garbage key", "Bearer garbage"],
    ["well-shaped unknown key", `Bearer ek_${"0".repeat(36)}`],
    ["admin token with a suffix", `Bearer ${TOKEN}-x`],
  ])("%s → 401 JSON", async (_label, authorization) => {
    const res = await withAuth(authorization, "/v1/jobs");
    await expectError(res, 401, "unauthorized");
    expect(res.headers.get("WWW-Authenticate")).toMatch(/^Bearer/);
  });

  it("a revoked key → 401", async () => {
    const t = await createTenant();
    const added = await jsonOf<{ id: string; apiKey: string }>(
      await t.api(`/v1/tenants/${t.id}/keys`, { method: "POST", json: { scopes: ["admin"] } }),
      201,
    );
    expect((await api(`/v1/tenants/${t.id}/keys/${added.id}`, { method: "DELETE" })).status).toBe(200);
    await expectError(await asKey(added.apiKey)("/v1/jobs"), 401, "unauthorized");
    await expectError(await asKey(added.apiKey)(`/v1/tenants/${t.id}`), 401, "unauthorized");
    expect((await t.api("/v1/jobs")).status).toBe(200);
  });
});

// ---------------------------------------------------------------------------------------------

/** What B aims at: A's objects, or well-formed ids that name nothing. */
interface Targets {
  job: string;
  run: string;
  deadJob: string;
  deadRun: string;
  tenant: string;
  keyId: string;
}

const hour = 3_600_000;
const backfill = () => ({ from: new Date(Date.now() - 3 * hour).toISOString(), to: new Date().toISOString() });

/** Every route that takes another tenant's id. `b` is B's own tenant id, for routes under it. */
const ROUTES: Array<[string, (call: Call, t: Targets, b: string) => Promise<Response>]> = [
  ["GET /v1/jobs/:id", (call, t) => call(`/v1/jobs/${t.job}`)],
  ["PATCH /v1/jobs/:id", (call, t) => call(`/v1/jobs/${t.job}`, { method: "PATCH", json: { name: "b-was-here" } })],
  ["DELETE /v1/jobs/:id", (call, t) => call(`/v1/jobs/${t.job}`, { method: "DELETE" })],
  ["POST /v1/jobs/:id/pause", (call, t) => call(`/v1/jobs/${t.job}/pause`, { method: "POST" })],
  ["POST /v1/jobs/:id/resume", (call, t) => call(`/v1/jobs/${t.job}/resume`, { method: "POST" })],
  ["POST /v1/jobs/:id/trigger", (call, t) => call(`/v1/jobs/${t.job}/trigger`, { method: "POST" })],
  ["POST /v1/jobs/:id/trigger (dead-letter job)", (call, t) => call(`/v1/jobs/${t.deadJob}/trigger`, { method: "POST" })],
  ["POST /v1/jobs/:id/backfill", (call, t) => call(`/v1/jobs/${t.job}/backfill`, { method: "POST", json: backfill() })],
  ["GET /v1/jobs/:id/runs", (call, t) => call(`/v1/jobs/${t.job}/runs`)],
  ["GET /v1/runs/:id", (call, t) => call(`/v1/runs/${t.run}`)],
  ["GET /v1/runs/:id (dead letter)", (call, t) => call(`/v1/runs/${t.deadRun}`)],
  ["POST /v1/runs/:id/retry", (call, t) => call(`/v1/runs/${t.deadRun}/retry`, { method: "POST" })],
  ["GET /v1/dead-letters?jobId=", (call, t) => call(`/v1/dead-letters?jobId=${t.deadJob}`)],
  ["GET /v1/tenants/:id", (call, t) => call(`/v1/tenants/${t.tenant}`)],
  ["POST /v1/tenants/:id/keys", (call, t) => call(`/v1/tenants/${t.tenant}/keys`, { method: "POST" })],
  ["GET /v1/tenants/:id/keys", (call, t) => call(`/v1/tenants/${t.tenant}/keys`)],
  ["DELETE /v1/tenants/:id/keys/:keyId", (call, t) => call(`/v1/tenants/${t.tenant}/keys/${t.keyId}`, { method: "DELETE" })],
  ["DELETE /v1/tenants/:own/keys/:othersKeyId", (call, t, b) => call(`/v1/tenants/${b}/keys/${t.keyId}`, { method: "DELETE" })],
  ["GET /v1/signing-keys?tenantId=", (call, t) => call(`/v1/signing-keys?tenantId=${t.tenant}`)],
  ["POST /v1/signing-keys/rotate?tenantId=", (call, t) => call(`/v1/signing-keys/rotate?tenantId=${t.tenant}`, { method: "POST" })],
];

/** An error body with every id replaced by its kind, so A's answer and an unknown id's compare equal. */
function normalized(body: ErrorBody): ErrorBody {
  const message = body.error.message
    .replace(/run_[0-9A-Za-z_-]+/g, "<run>")
    .replace(/job_[0-9a-z]{19}/g, "<job>")
    .replace(/ten_[0-9a-z]{20}/g, "<tenant>")
    .replace(/key_[0-9a-z]{20}/g, "<key>");
  return { error: { ...body.error, message } };
}

describe("tenant isolation", () => {
  let a: Tenant;
  let b: Tenant;
  let okUrl: string;
  let deadUrl: string;
  let okJob: Job;
  let deadJob: Job;
  let bJob: Job;
  let okRun: Run;
  let deadRun: Run;
  let signingBefore: unknown;
  let keysBefore: unknown;
  let jobBefore: Job;
  let deadJobBefore: Job;

  beforeAll(async () => {
    a = await createTenant();
    b = await createTenant();
    okUrl = receiverPath("iso-ok");
    deadUrl = receiverPath("iso-dead", "status=400");
    okJob = await createJob({ schedule: FAR_CRON, target: { url: okUrl } }, a.api);
    deadJob = await createJob({ schedule: { every: "1h" }, target: { url: deadUrl }, retry: { maxAttempts: 1 } }, a.api);
    bJob = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("iso-b") } }, b.api);

    const triggered = await jsonOf<Run>(await a.api(`/v1/jobs/${okJob.id}/trigger`, { method: "POST" }), 202);
    okRun = await waitForRun(triggered.id, ["succeeded"]);
    await fireNow(deadJob);
    const [fired] = await listRuns(deadJob.id);
    deadRun = await waitForRun(fired!.id, ["failed"]);
    expect(await hitsOf(okUrl)).toHaveLength(1);
    expect(await hitsOf(deadUrl)).toHaveLength(1);

    jobBefore = await jsonOf<Job>(await a.api(`/v1/jobs/${okJob.id}`));
    deadJobBefore = await jsonOf<Job>(await a.api(`/v1/jobs/${deadJob.id}`));
    signingBefore = await jsonOf(await a.api("/v1/signing-keys"));
    keysBefore = await jsonOf(await a.api(`/v1/tenants/${a.id}/keys`));
  }, 60_000);

  it("the job JSON carries its tenant", async () => {
    expect(okJob.tenantId).toBe(a.id);
    expect(jobBefore.tenantId).toBe(a.id);
    expect(bJob.tenantId).toBe(b.id);
    const adminJob = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("iso-admin") } });
    expect(adminJob.tenantId).toBe("default");
  });

  it.each(ROUTES)("%s: B gets the same 404 for A's ids as for unknown ids", async (_label, call) => {
    const mine: Targets = { job: okJob.id, run: okRun.id, deadJob: deadJob.id, deadRun: deadRun.id, tenant: a.id, keyId: a.keyId };
    const unknown: Targets = {
      job: unknownJobId(),
      run: unknownRunId(),
      deadJob: unknownJobId(),
      deadRun: unknownRunId(),
      tenant: unknownTenantId(),
      keyId: unknownKeyId(),
    };
    const forA = await expectError(await call(b.api, mine, b.id), 404, "not_found");
    const forUnknown = await expectError(await call(b.api, unknown, b.id), 404, "not_found");
    expect(Object.keys(forA.error).sort()).toEqual(Object.keys(forUnknown.error).sort());
    expect(normalized(forA)).toEqual(normalized(forUnknown));
    // The answer names nothing of A's but the id B itself sent.
    expect(JSON.stringify(forA)).not.toContain(okUrl);
    expect(JSON.stringify(forA)).not.toContain(a.apiKey);
  });

  it("B cannot reach the admin's own tenant (`default`) either: 404 as for an unknown tenant", async () => {
    for (const [known, unknown] of [
      [`/v1/tenants/default`, `/v1/tenants/${unknownTenantId()}`],
      [`/v1/tenants/default/keys`, `/v1/tenants/${unknownTenantId()}/keys`],
      [`/v1/signing-keys?tenantId=default`, `/v1/signing-keys?tenantId=${unknownTenantId()}`],
    ]) {
      const forDefault = await expectError(await b.api(known!), 404, "not_found");
      const forUnknown = await expectError(await b.api(unknown!), 404, "not_found");
      expect(Object.keys(forDefault.error).sort()).toEqual(Object.keys(forUnknown.error).sort());
    }
  });

  it("B cannot create a job in A's name: tenantId in the body is refused (400), nothing is created", async () => {
    const res = await b.api("/v1/jobs", {
      method: "POST",
      json: { tenantId: a.id, schedule: FAR_CRON, target: { url: receiverPath("iso-forge") } },
    });
    await expectError(res, 400, "invalid_request");
    expect(await liveJobsInD1(a.id)).toBe(2);
    expect(await liveJobsInD1(b.id)).toBe(1);
  });

  it("after all of B's attempts, A's jobs, runs, keys and signing secrets are unchanged", async () => {
    const job = await jsonOf<Job>(await a.api(`/v1/jobs/${okJob.id}`));
    expect(job).toEqual(jobBefore);
    expect(job).toMatchObject({ version: 1, paused: false, name: null });
    expect(await jsonOf<Job>(await a.api(`/v1/jobs/${deadJob.id}`))).toEqual(deadJobBefore);
    const row = await env.DB.prepare("SELECT version, paused, deleted_at FROM jobs WHERE id = ?")
      .bind(okJob.id)
      .first<Record<string, unknown>>();
    expect(row).toEqual({ version: 1, paused: 0, deleted_at: null });

    expect((await listRuns(okJob.id)).map((r) => r.id)).toEqual([okRun.id]);
    expect((await listRuns(deadJob.id)).map((r) => r.id)).toEqual([deadRun.id]);
    expect(await getRun(okRun.id)).toMatchObject({ state: "succeeded", attempts: 1 });
    expect(await getRun(deadRun.id)).toMatchObject({ state: "failed", attempts: 1 });
    expect(await hitsOf(okUrl)).toHaveLength(1);
    expect(await hitsOf(deadUrl)).toHaveLength(1);

    expect(await jsonOf(await a.api(`/v1/tenants/${a.id}/keys`))).toEqual(keysBefore);
    expect(await jsonOf(await a.api("/v1/signing-keys"))).toEqual(signingBefore);
    expect((await a.api("/v1/jobs")).status).toBe(200);
  });

  it("B's own signing keys are its own, and naming its own tenant works", async () => {
    const own = await jsonOf<{ tenantId: string; current: string }>(await b.api("/v1/signing-keys"));
    expect(own.tenantId).toBe(b.id);
    expect(await jsonOf(await b.api(`/v1/signing-keys?tenantId=${b.id}`))).toEqual(own);
    expect(own.current).not.toBe((signingBefore as { current: string }).current);
  });

  it("lists: B's jobs and dead letters hold none of A's; A's hold its own", async () => {
    expect(await allJobs(b.api)).toEqual([bJob.id]);
    const aJobs = await allJobs(a.api);
    expect(aJobs.sort()).toEqual([okJob.id, deadJob.id].sort());

    const bDead = await jsonOf<Page<Run>>(await b.api("/v1/dead-letters?limit=200"));
    expect(bDead.items).toEqual([]);
    const aDead = await jsonOf<Page<Run>>(await a.api("/v1/dead-letters?limit=200"));
    expect(aDead.items.map((r) => r.id)).toEqual([deadRun.id]);
    const aDeadOfJob = await jsonOf<Page<Run>>(await a.api(`/v1/dead-letters?jobId=${deadJob.id}`));
    expect(aDeadOfJob.items.map((r) => r.id)).toEqual([deadRun.id]);
    // B asking for dead letters of its own job sees none of A's either.
    expect((await jsonOf<Page<Run>>(await b.api(`/v1/dead-letters?jobId=${bJob.id}`))).items).toEqual([]);
  });

  it("metrics: B's count none of A's runs, A's count its own", async () => {
    const bm = await jsonOf<Record<string, any>>(await b.api("/v1/metrics?window=1h"));
    expect(bm.runsByState).toEqual({});
    expect(bm.attempts.byOutcome).toEqual({});
    expect(bm.fireLagMs.count).toBe(0);
    const am = await jsonOf<Record<string, any>>(await a.api("/v1/metrics?window=1h"));
    expect(am.runsByState).toEqual({ succeeded: 1, failed: 1 });
    expect(am.attempts.byOutcome).toEqual({ succeeded: 1, failed: 1 });
  });

  it("the admin token sees every tenant's jobs, and A's job and run", async () => {
    const all = await allJobs(api);
    expect(all).toEqual(expect.arrayContaining([okJob.id, deadJob.id, bJob.id]));
    expect(await jsonOf<Job>(await api(`/v1/jobs/${okJob.id}`))).toMatchObject({ id: okJob.id, tenantId: a.id });
    expect(await jsonOf<Run>(await api(`/v1/runs/${okRun.id}`))).toMatchObject({ id: okRun.id, jobId: okJob.id, state: "succeeded" });
    expect(await jsonOf<{ tenantId: string }>(await api(`/v1/signing-keys?tenantId=${a.id}`))).toEqual(signingBefore);
  });
});

// ---------------------------------------------------------------------------------------------

describe("quotas", () => {
  it("maxJobs: the third job → 403 quota_exceeded; deleting one makes room", async () => {
    const t = await createTenant({ maxJobs: 2 });
    const body = () => ({ schedule: FAR_CRON, target: { url: receiverPath("quota") } });
    const first = await createJob(body(), t.api);
    await createJob(body(), t.api);
    await expectError(await t.api("/v1/jobs", { method: "POST", json: body() }), 403, "quota_exceeded");
    expect(await liveJobsInD1(t.id)).toBe(2);
    expect((await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = ?").bind(t.id).first<{ n: number }>())!.n).toBe(2);

    expect((await t.api(`/v1/jobs/${first.id}`, { method: "DELETE" })).status).toBe(200);
    await createJob(body(), t.api);
    expect(await liveJobsInD1(t.id)).toBe(2);
    await expectError(await t.api("/v1/jobs", { method: "POST", json: body() }), 403, "quota_exceeded");
    expect(await liveJobsInD1(t.id)).toBe(2);
  });

  it("maxJobs holds under concurrent creates: exactly the quota is created", async () => {
    const t = await createTenant({ maxJobs: 2 });
    const answers = await Promise.all(
      Array.from({ length: 6 }, () =>
        t.api("/v1/jobs", { method: "POST", json: { schedule: FAR_CRON, target: { url: receiverPath("quota-race") } } }),
      ),
    );
    const statuses = answers.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 201, 403, 403, 403, 403]);
    for (const res of answers.filter((r) => r.status === 403)) await expectError(res, 403, "quota_exceeded");
    for (const res of answers.filter((r) => r.status === 201)) await res.body?.cancel();
    expect(await liveJobsInD1(t.id)).toBe(2);
    expect(await allJobs(t.api)).toHaveLength(2);
  });

  it("requestsPerSecond: a burst over the bucket gets 429 with an integer Retry-After; the admin is never limited", async () => {
    const t = await createTenant({ requestsPerSecond: 2 });
    const answers = await Promise.all(Array.from({ length: 10 }, () => t.api("/v1/jobs")));
    const statuses = answers.map((r) => r.status);
    expect(
      statuses.every((s) => s === 200 || s === 429),
      statuses.join(","),
    ).toBe(true);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(1);
    const limited = answers.filter((r) => r.status === 429);
    expect(limited.length).toBeGreaterThanOrEqual(1);
    for (const res of limited) {
      await expectError(res, 429, "rate_limited");
      const retryAfter = res.headers.get("Retry-After") ?? "";
      expect(retryAfter).toMatch(/^\d+$/);
      expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
    }
    for (const res of answers.filter((r) => r.status === 200)) await res.body?.cancel();

    const admin = await Promise.all(Array.from({ length: 30 }, () => api("/v1/jobs?limit=1")));
    expect(admin.map((r) => r.status)).toEqual(Array(30).fill(200));
    for (const res of admin) await res.body?.cancel();
  });

  it("requestsPerSecond: steady requests cost a call to the tenant's gate per block of them (1, 2, 4, …), not one each", async () => {
    const t = await createTenant({ requestsPerSecond: 10_000 });
    const gateCalls = async () => {
      const res = await api("/v1/metrics?window=1h");
      const ops = ((await res.json()) as { cost: { workerOperations: Record<string, { calls: number; gateRequests: number }> } }).cost
        .workerOperations;
      return ops["GET /v1/me"] ?? { calls: 0, gateRequests: 0 };
    };
    const before = await gateCalls();
    for (let i = 0; i < 31; i++) expect((await t.api("/v1/me")).status).toBe(200);
    const after = await vi.waitFor(
      async () => {
        const now = await gateCalls();
        expect(now.calls - before.calls).toBe(31);
        return now;
      },
      { timeout: 15_000, interval: 200 },
    );
    // Blocks of 1, 2, 4, 8 and 16: 31 requests; one more call at most, should a block have lapsed.
    expect(after.gateRequests - before.gateRequests).toBeGreaterThanOrEqual(5);
    expect(after.gateRequests - before.gateRequests).toBeLessThanOrEqual(6);
  });
});
