import { env, SELF } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { qstash } from "../../src/api/qstash/app";
import { ROUTE_SCOPES } from "../../src/api/route-scopes";
import { grants, SCOPES, type Scope } from "../../src/model/scopes";
import { api, createJob, createTenant, NEXT_TOKEN, receiverPath } from "./helpers";

/**
 * Least privilege (docs/security.md): every route of /openapi.json, and every route of the /v2
 * (QStash) app, has its scope in the one table (src/api/route-scopes.ts), and every route is
 * called with a key of every scope: a key below the route's scope is refused with 403 naming
 * the scope and changes nothing; a key at or above it is not refused for its scope.
 */

const ORIGIN = "https://edgecron.test";
const METHODS = ["get", "put", "post", "patch", "delete"];

type Doc = { paths: Record<string, Record<string, unknown>> };

async function operations(): Promise<string[]> {
  const res = await SELF.fetch(`${ORIGIN}/openapi.json`);
  expect(res.status).toBe(200);
  const doc = (await res.json()) as Doc;
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.keys(item)
      .filter((m) => METHODS.includes(m))
      // The document writes path parameters {id}; the route table :id.
      .map((m) => `${m.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`),
  );
}

/**
 * The /v2 routes, from the /v2 app's own route table (they are not in /openapi.json): a route
 * added there without a row in the scope table fails the walk.
 */
function qstashOperations(): string[] {
  return [...new Set(qstash.routes.filter((r) => r.method !== "ALL").map((r) => `${r.method} /v2${r.path}`))];
}

/** Every route, /v1 (as /openapi.json has them) and /v2. */
const allOperations = async () => [...(await operations()), ...qstashOperations()];

type Tenant = Awaited<ReturnType<typeof createTenant>>;
let tenant: Tenant;
const keys: Partial<Record<Scope, string>> = {};
let jobId = "";
/** The job the walk over every route calls with: the calls allowed change it (and delete it). */
let walkedJobId = "";

async function makeKey(as: Tenant, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await as.api(`/v1/tenants/${as.id}/keys`, { method: "POST", json: body });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

const withKey =
  (key: string) =>
  (path: string, init: Parameters<typeof api>[1] = {}) =>
    api(path, { ...init, headers: { ...Object.fromEntries(new Headers(init.headers)), Authorization: `Bearer ${key}` } });

/** A request to a route with its parameters filled in: the tenant's own ids, so that what is allowed finds its object. */
function requestFor(route: string): { path: string; init: Parameters<typeof api>[1] } {
  const [method, template] = route.split(" ") as [string, string];
  if (template.startsWith("/v2/")) return qstashRequestFor(method, template);
  const path = template
    .replace("/tenants/:id", `/tenants/${tenant.id}`)
    .replace(":keyId", "key_00000000000000000000")
    .replace("/jobs/:id", `/jobs/${walkedJobId}`)
    .replace("/runs/:id", `/runs/run_${walkedJobId.slice(4)}_0000`);
  const hasBody = ["POST", "PATCH", "PUT"].includes(method);
  return { path, init: { method, ...(hasBody && { json: {} }) } };
}

/** A /v2 request: destinations on the loopback receiver, ids and names of nothing the tenant has. */
function qstashRequestFor(method: string, template: string): { path: string; init: Parameters<typeof api>[1] } {
  const path = template
    .replace(":queue", "walked-queue")
    .replace(":name", "walked-name")
    .replace(":id", "none")
    .replace("*", receiverPath("scopes-v2"));
  const hasBody = ["POST", "PATCH", "PUT"].includes(method);
  return { path, init: { method, ...(hasBody && { json: {} }) } };
}

/** A refusal's code and message: /v1's `{ error: { code, message } }`, or /v2's (QStash's) `{ error: message }`. */
function refusalOf(route: string, res: Response, text: string): { code?: string; message?: string } {
  if (!res.headers.get("Content-Type")?.includes("json")) return {};
  const error = (JSON.parse(text) as { error?: string | { code: string; message: string } }).error;
  if (route.includes(" /v2/")) {
    if (typeof error !== "string") return {};
    // QStash's shape has no code: a 403 about the key's scope or its prefix is this one.
    return { ...(res.status === 403 && /scope|not named jobs/.test(error) && { code: "insufficient_scope" }), message: error };
  }
  return typeof error === "object" ? error : {};
}

beforeAll(async () => {
  // No request rate limit: this file makes a hundred calls in a burst.
  tenant = await createTenant({ requestsPerSecond: null });
  for (const scope of SCOPES) {
    const made = await makeKey(tenant, { scopes: [scope] });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    keys[scope] = made.json.apiKey as string;
  }
  const job = { schedule: { cron: "0 0 1 1 *" }, target: { url: receiverPath("scopes") } };
  jobId = (await createJob({ ...job, name: "scoped-job" }, tenant.api)).id;
  walkedJobId = (await createJob({ ...job, name: "walked-job" }, tenant.api)).id;
});

describe("the route scope table", () => {
  it("names every route of /openapi.json, and no route that is not there", async () => {
    const documented = await operations();
    expect(documented.length).toBeGreaterThan(30);
    const missing = documented.filter((r) => !(r in ROUTE_SCOPES));
    expect(missing, "routes without a scope in src/api/route-scopes.ts").toEqual([]);
    const v2 = qstashOperations();
    expect(v2.length).toBeGreaterThan(30);
    expect(
      v2.filter((r) => !(r in ROUTE_SCOPES)),
      "/v2 routes without a scope in src/api/route-scopes.ts",
    ).toEqual([]);
    const stale = Object.keys(ROUTE_SCOPES).filter((r) => !documented.includes(r) && !v2.includes(r));
    expect(stale, "scopes of routes that do not exist").toEqual([]);
  });

  it("the document says each route's scope, as its bearer requirement and in its description", async () => {
    const doc = (await (await SELF.fetch(`${ORIGIN}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { security?: Array<Record<string, string[]>>; description?: string }>>;
    };
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        const access = ROUTE_SCOPES[`${method.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`];
        if (!access || access === "completion-token") continue;
        expect(op.security, `${method} ${path}`).toEqual([{ bearer: [access.scope] }]);
        expect(op.description, `${method} ${path}`).toContain(`\`${access.scope}\` scope`);
      }
    }
  });

  it("refuses every route to a key below its scope (403 naming the scope), and not to one at or above it", async () => {
    const routes = await allOperations();
    const seen: string[] = [];
    for (const route of routes) {
      const access = ROUTE_SCOPES[route]!;
      if (access === "completion-token") continue;
      for (const scope of SCOPES) {
        const { path, init } = requestFor(route);
        const res = await withKey(keys[scope]!)(path, init);
        // /metrics answers in Prometheus's text format; every refusal is JSON.
        const text = await res.text();
        const refusal = refusalOf(route, res, text);
        if (grants([scope], access.scope)) {
          expect(refusal.code, `${route} with a ${scope} key: ${text}`).not.toBe("insufficient_scope");
          expect(res.status, `${route} with a ${scope} key: ${text}`).not.toBe(500);
        } else {
          expect(res.status, `${route} with a ${scope} key: ${text}`).toBe(403);
          expect(refusal.code, route).toBe("insufficient_scope");
          expect(refusal.message, route).toContain(`"${access.scope}"`);
          expect(res.headers.get("WWW-Authenticate")).toContain(`scope="${access.scope}"`);
          seen.push(`${route} ${scope}`);
        }
      }
    }
    // Write and admin routes exist, so some refusals must have been seen; /v2 has both.
    expect(seen.length).toBeGreaterThan(20);
    expect(seen.filter((r) => r.includes(" /v2/")).length).toBeGreaterThan(20);
  });

  it("refuses every route about the whole tenant to a key limited to a job prefix, and no per-job route within its scope", async () => {
    const made = await makeKey(tenant, { scopes: ["write"], jobPrefix: "walked-" });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const limited = withKey(made.json.apiKey as string);
    let refusedWhole = 0;
    for (const route of await allOperations()) {
      const access = ROUTE_SCOPES[route]!;
      if (access === "completion-token") continue;
      const { path, init } = requestFor(route);
      const res = await limited(path, init);
      const text = await res.text();
      const { code, message } = refusalOf(route, res, text);
      if (!access.perJob || !grants(["write"], access.scope)) {
        expect([res.status, code], route).toEqual([403, "insufficient_scope"]);
        if (!access.perJob) refusedWhole++;
        // /v2 says why: its messages are not named jobs.
        if (route.includes(" /v2/")) expect(message, route).toContain("not named jobs");
      } else {
        expect(code, `${route}: ${text}`).not.toBe("insufficient_scope");
        expect(res.status, route).not.toBe(500);
      }
    }
    expect(refusedWhole).toBeGreaterThan(10);
  });

  it("a refused change changes nothing: the job, the keys and the audit log are as they were", async () => {
    const read = withKey(keys.read!);
    const write = withKey(keys.write!);
    const count = (sql: string) => env.DB.prepare(sql).bind(tenant.id).first<{ n: number }>();
    const KEYS = "SELECT COUNT(*) AS n FROM api_keys WHERE tenant_id = ?";
    const AUDIT = "SELECT COUNT(*) AS n FROM audit_log WHERE tenant_id = ?";
    const [keysBefore, auditBefore] = [await count(KEYS), await count(AUDIT)];
    expect((await read(`/v1/jobs/${jobId}`, { method: "DELETE" })).status).toBe(403);
    expect((await read(`/v1/jobs/${jobId}/pause`, { method: "POST" })).status).toBe(403);
    expect((await write(`/v1/tenants/${tenant.id}/keys`, { method: "POST", json: { scopes: ["admin"] } })).status).toBe(403);
    expect((await write("/v1/signing-keys")).status).toBe(403);
    const job = await (await read(`/v1/jobs/${jobId}`)).json<{ paused: boolean }>();
    expect(job.paused).toBe(false);
    expect((await count(KEYS))!.n).toBe(keysBefore!.n);
    expect((await count(AUDIT))!.n).toBe(auditBefore!.n);
  });
});

describe("the QStash signing keys", () => {
  it("a write key neither reads nor rotates them through /v2/keys (403 naming admin), and nothing is rotated", async () => {
    const admin = withKey(keys.admin!);
    const write = withKey(keys.write!);
    const before = await (await admin("/v1/signing-keys")).text();
    const AUDIT = "SELECT COUNT(*) AS n FROM audit_log WHERE tenant_id = ?";
    const auditBefore = await env.DB.prepare(AUDIT).bind(tenant.id).first<{ n: number }>();
    for (const [path, init] of [
      ["/v2/keys", {}],
      ["/v2/keys/rotate", { method: "POST" }],
    ] as const) {
      const res = await write(path, init);
      const text = await res.text();
      expect(res.status, `${path}: ${text}`).toBe(403);
      // In QStash's shape, as /v2 answers every error.
      expect(JSON.parse(text)).toEqual({ error: expect.stringContaining('"admin"') });
      expect(text).not.toMatch(/whsec_|"current"/);
    }
    expect(await (await admin("/v1/signing-keys")).text()).toBe(before);
    expect((await env.DB.prepare(AUDIT).bind(tenant.id).first<{ n: number }>())!.n).toBe(auditBefore!.n);
    // The admin key may, as on /v1.
    expect((await admin("/v2/keys")).status).toBe(200);
  });
});

describe("keys and their grants", () => {
  it("a new key is read-only unless asked otherwise, and says so", async () => {
    const made = await makeKey(tenant, undefined);
    expect(made.status).toBe(201);
    expect(made.json.scopes).toEqual(["read"]);
    const me = await withKey(made.json.apiKey as string)("/v1/me");
    expect(await me.json()).toMatchObject({ admin: false, tenantId: tenant.id, keyId: made.json.id, scopes: ["read"], jobPrefix: null });
  });

  it("refuses an unknown scope with 400 naming the field", async () => {
    const made = await makeKey(tenant, { scopes: ["root"] });
    expect(made.status).toBe(400);
    expect(JSON.stringify(made.json)).toContain("scopes.0");
  });

  it("keys made before scopes existed keep every scope, so the upgrade locks nobody out", async () => {
    // As migration 0011 leaves a key inserted before it: no scopes given, the column's default.
    const key = `ek_${"a".repeat(30)}${crypto.randomUUID().replace(/-/g, "").slice(0, 6)}`;
    const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key));
    const hash = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
    await env.DB.prepare("INSERT INTO api_keys (id, tenant_id, hash, prefix, created_at) VALUES (?, ?, ?, ?, 0)")
      .bind(`key_${"b".repeat(14)}${crypto.randomUUID().slice(0, 6)}`, tenant.id, hash, key.slice(0, 7))
      .run();
    const me = await (await withKey(key)("/v1/me")).json();
    expect(me).toMatchObject({ scopes: ["read", "write", "admin"], jobPrefix: null });
    expect((await withKey(key)("/v1/signing-keys")).status).toBe(200);
  });

  it("a key limited to a job prefix sees and makes only those jobs, and no route about the whole tenant", async () => {
    const made = await makeKey(tenant, { scopes: ["write"], jobPrefix: "deploy-" });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const deploy = withKey(made.json.apiKey as string);
    const body = { schedule: { cron: "0 0 1 1 *" }, target: { url: receiverPath("prefix") }, breaker: false };
    const refused = await deploy("/v1/jobs", { method: "POST", json: { ...body, name: "other" } });
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ error: { code: "insufficient_scope", issues: [{ path: "name" }] } });
    const nameless = await deploy("/v1/jobs", { method: "POST", json: body });
    expect(nameless.status).toBe(403);
    const own = await deploy("/v1/jobs", { method: "POST", json: { ...body, name: "deploy-web" } });
    expect(own.status, await own.clone().text()).toBe(201);
    const ownId = ((await own.json()) as { id: string }).id;
    const listed = (await (await deploy("/v1/jobs")).json()) as { items: Array<{ id: string }> };
    expect(listed.items.map((j) => j.id)).toEqual([ownId]);
    // The tenant's other job is answered as if it did not exist.
    expect((await deploy(`/v1/jobs/${jobId}`)).status).toBe(404);
    expect((await deploy(`/v1/jobs/${jobId}/pause`, { method: "POST" })).status).toBe(404);
    const rename = await deploy(`/v1/jobs/${ownId}`, { method: "PATCH", json: { name: "escaped" } });
    expect(rename.status).toBe(403);
    const batch = await deploy("/v1/jobs/batch", {
      method: "POST",
      json: {
        jobs: [
          { ...body, name: "deploy-api" },
          { ...body, name: "db" },
        ],
      },
    });
    expect(batch.status).toBe(200);
    const results = ((await batch.json()) as { results: Array<{ status: number; error?: { code: string } }> }).results;
    expect(results.map((r) => [r.status, r.error?.code])).toEqual([
      [201, undefined],
      [403, "insufficient_scope"],
    ]);
    for (const path of ["/v1/dead-letters", "/v1/metrics", "/metrics", `/v1/tenants/${tenant.id}`]) {
      const res = await deploy(path);
      expect(res.status, path).toBe(403);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("insufficient_scope");
    }
  });

  it("the admin token being rotated in works beside the current one, and the log says which was used", async () => {
    const next = withKey(NEXT_TOKEN);
    const res = await next(`/v1/tenants/${tenant.id}/keys`, { method: "POST", json: { scopes: ["read"] } });
    expect(res.status).toBe(201);
    const keyId = ((await res.json()) as { id: string }).id;
    const entry = await env.DB.prepare("SELECT actor FROM audit_log WHERE subject = ?").bind(keyId).first<{ actor: string }>();
    expect(entry?.actor).toBe("admin:next");
    expect((await withKey(`${NEXT_TOKEN}-but-wrong`)("/v1/me")).status).toBe(401);
  });
});
