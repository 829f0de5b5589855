/**
 * The hostile walk (docs/security.md): every route of /v1 (as /openapi.json lists them, /metrics
 * with them) and of /v2 (as the QStash app's route table has them), called with every kind of
 * credential a caller can hold: none, junk, a key-shaped junk, a revoked key, a `read`, `write`
 * and `admin` key, a key limited to a job prefix, and the admin token. Each answer is checked
 * against the one scope table (src/api/route-scopes.ts). Then every route that takes an id or a
 * name is called by one tenant with the other's, the two tenants' jobs and messages sharing a
 * shard, and the other's objects are read back unchanged.
 */
import { env, SELF } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { qstash } from "../../src/api/qstash/app";
import { accessOf, type RouteAccess } from "../../src/api/route-scopes";
import { shardNamedBy } from "../../src/model/ids";
import { grants, SCOPES, type Scope } from "../../src/model/scopes";
import { jobIdOfMessage } from "../../src/qstash/ids";
import { api, createTenant, receiverPath, TOKEN, waitForRun } from "./helpers";
import { deadLetterIds } from "./messages";

const ORIGIN = "https://edgecron.test";
const METHODS = ["get", "put", "post", "patch", "delete"];

type Tenant = Awaited<ReturnType<typeof createTenant>>;
type Init = RequestInit & { json?: unknown };
type Call = (path: string, init?: Init) => Promise<Response>;

/** What one tenant holds, for routes that name an object to find it. */
interface Objects {
  tenant: Tenant;
  jobId: string;
  runId: string;
  messageId: string;
  scheduleId: string;
  dlqId: string;
  queue: string;
  topic: string;
}

async function documentedRoutes(): Promise<string[]> {
  const res = await SELF.fetch(`${ORIGIN}/openapi.json`);
  expect(res.status).toBe(200);
  const doc = (await res.json()) as { paths: Record<string, Record<string, unknown>> };
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.keys(item)
      .filter((m) => METHODS.includes(m))
      .map((m) => `${m.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`),
  );
}

/** /v2's routes, from the QStash app's own table: a route added there is walked without a word here. */
function qstashRoutes(): string[] {
  const seen = new Set<string>();
  for (const route of qstash.routes) if (route.method !== "ALL") seen.add(`${route.method} /v2${route.path}`);
  return [...seen];
}

const withCredential =
  (credential: string | null): Call =>
  (path, init = {}) => {
    const headers = new Headers(init.headers);
    if (credential === null) headers.set("Authorization", "");
    else headers.set("Authorization", `Bearer ${credential}`);
    return api(path, { ...init, headers });
  };

/** A key of the right form that no tenant holds: a fresh prefix each time, so no prefix's throttle is met. */
const keyShapedJunk = () => `ek_${crypto.randomUUID().replace(/-/g, "")}${crypto.randomUUID().replace(/-/g, "").slice(0, 8)}`;

/** A route's request with its parameters filled in from `of`: its objects, so that what is allowed finds them. */
function requestFor(route: string, of: Objects): { path: string; init: Init } {
  const [method, template] = route.split(" ") as [string, string];
  const target = receiverPath("hostile");
  const path = template
    .replace("/tenants/:id", `/tenants/${of.tenant.id}`)
    .replace(":keyId", "key_00000000000000000000")
    .replace("/jobs/:id", `/jobs/${of.jobId}`)
    .replace("/runs/:id", `/runs/${of.runId}`)
    .replace("/messages/:id", `/messages/${of.messageId}`)
    .replace("/schedules/:id", `/schedules/${of.scheduleId}`)
    .replace("/dlq/:id", `/dlq/${of.dlqId}`)
    .replace("/queues/:name", `/queues/${of.queue}`)
    .replace("/enqueue/:queue/*", `/enqueue/${of.queue}/${target}`)
    .replace("/topics/:name", `/topics/${of.topic}`)
    .replace("/publish/*", `/publish/${target}`)
    .replace("/schedules/*", `/schedules/${target}`);
  if (!["POST", "PATCH", "PUT"].includes(method)) return { path, init: { method } };
  // /v1 takes JSON only; {} is refused by most routes' validators, which is an answer past the scope check.
  return { path, init: { method, json: {} } };
}

/** The id with one of its random characters changed: the same shape, the same shard, held by nobody. */
function forged(id: string): string {
  const at = 15;
  const other = id[at] === "a" ? "b" : "a";
  return `${id.slice(0, at)}${other}${id.slice(at + 1)}`;
}

function forgedObjects(of: Objects): Objects {
  return {
    ...of,
    jobId: forged(of.jobId),
    runId: forged(of.runId),
    messageId: forged(of.messageId),
    scheduleId: forged(of.scheduleId),
    dlqId: forged(of.dlqId),
    queue: `${of.queue}-none`,
    topic: `${of.topic}-none`,
  };
}

/** An answer about forged ids, written back with the real ones, to compare it with the answer about those. */
function unforged(text: string, none: Objects, real: Objects): string {
  const keys = ["jobId", "runId", "messageId", "scheduleId", "dlqId"] as const;
  return keys.reduce((t, k) => t.replaceAll(none[k], real[k]), text);
}

const isIdRoute = (route: string) => /:(id|keyId|name|queue)\b/.test(route);

async function answerOf(res: Response): Promise<{ status: number; text: string; code?: string }> {
  const text = await res.text();
  let code: string | undefined;
  if (res.headers.get("Content-Type")?.includes("json")) {
    const body = JSON.parse(text) as { error?: { code?: string } | string | null } | null;
    const error = body?.error;
    code = error !== null && typeof error === "object" ? error.code : undefined;
  }
  return { status: res.status, text, code };
}

async function makeKey(as: Tenant, body: unknown): Promise<{ apiKey: string; id: string }> {
  const res = await as.api(`/v1/tenants/${as.id}/keys`, { method: "POST", json: body });
  expect(res.status, await res.clone().text()).toBe(201);
  return res.json();
}

async function batchJobs(tenant: Tenant, names: string[]): Promise<Array<{ id: string; shard: string; name: string }>> {
  const res = await tenant.api("/v1/jobs/batch", {
    method: "POST",
    json: {
      jobs: names.map((name) => ({ name, schedule: { cron: "0 0 1 1 *" }, target: { url: receiverPath("hostile") }, breaker: false })),
    },
  });
  expect(res.status, await res.clone().text()).toBe(200);
  const { results } = (await res.json()) as { results: Array<{ status: number; job?: { id: string; shard: string; name: string } }> };
  return results.map((r) => {
    expect(r.status).toBe(201);
    return r.job!;
  });
}

async function batchMessages(tenant: Tenant, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < count; start += 100) {
    const items = Array.from({ length: Math.min(100, count - start) }, () => ({
      destination: receiverPath("hostile-later"),
      headers: { "Upstash-Delay": "1h" },
      body: "later",
    }));
    const res = await tenant.api("/v2/batch", { method: "POST", json: items });
    expect(res.status, await res.clone().text()).toBe(200);
    ids.push(...((await res.json()) as Array<{ messageId: string }>).map((m) => m.messageId));
  }
  return ids;
}

/** Two lists' first pair whose items share a shard: birthday odds, so a few hundred each all but always meet. */
function sameShard<T>(a: T[], b: T[], shard: (item: T) => string): [T, T] {
  const byShard = new Map(a.map((item) => [shard(item), item]));
  const met = b.find((item) => byShard.has(shard(item)));
  expect(met, "no two of the tenants' objects met in one shard").toBeDefined();
  return [byShard.get(shard(met!))!, met!];
}

/** A tenant's every kind of object, its job named `walked-…` so a prefixed key reaches it. */
async function objectsOf(tenant: Tenant, jobId: string, messageId: string): Promise<Objects> {
  const run = await tenant.api(`/v1/jobs/${jobId}/trigger`, { method: "POST" });
  expect(run.status, await run.clone().text()).toBe(202);
  const runId = ((await run.json()) as { id: string }).id;
  await waitForRun(runId, ["succeeded"]);
  const schedule = await tenant.api(`/v2/schedules/${receiverPath("hostile-schedule")}`, {
    method: "POST",
    headers: { "Upstash-Cron": "0 0 1 1 *", "Content-Type": "text/plain" },
    body: "s",
  });
  expect(schedule.status, await schedule.clone().text()).toBe(200);
  const scheduleId = ((await schedule.json()) as { scheduleId: string }).scheduleId;
  const queue = `q-${crypto.randomUUID().slice(0, 8)}`;
  expect((await tenant.api("/v2/queues", { method: "POST", json: { queueName: queue, parallelism: 1 } })).status).toBe(200);
  const topic = `t-${crypto.randomUUID().slice(0, 8)}`;
  const endpoints = { endpoints: [{ name: "e", url: receiverPath("hostile-topic") }] };
  expect((await tenant.api(`/v2/topics/${topic}/endpoints`, { method: "POST", json: endpoints })).status).toBe(200);
  const dying = await tenant.api(`/v2/publish/${receiverPath("hostile-dead", "status=500")}`, {
    method: "POST",
    headers: { "Upstash-Retries": "0", "Content-Type": "text/plain" },
    body: "dies",
  });
  expect(dying.status).toBe(200);
  const [dlqId] = (await deadLetterIds(tenant, 1)) as [string];
  return { tenant, jobId, runId, messageId, scheduleId, dlqId, queue, topic };
}

/** What a tenant sees of its objects: read back after the other tenant's walk, it must not have changed. */
async function snapshot(of: Objects): Promise<Record<string, unknown>> {
  const read = async (path: string) => {
    const res = await of.tenant.api(path);
    return { status: res.status, body: await res.json() };
  };
  const queues = (await read("/v2/queues")).body as Array<{ name: string; lag: number; paused: boolean }>;
  return {
    job: await read(`/v1/jobs/${of.jobId}`),
    runs: await read(`/v1/jobs/${of.jobId}/runs`),
    run: await read(`/v1/runs/${of.runId}`),
    message: await read(`/v2/messages/${of.messageId}`),
    schedule: await read(`/v2/schedules/${of.scheduleId}`),
    dlq: await read(`/v2/dlq/${of.dlqId}`),
    queue: queues.find((q) => q.name === of.queue),
    topic: await read(`/v2/topics/${of.topic}`),
    tenant: await read(`/v1/tenants/${of.tenant.id}`),
    keys: (await read(`/v1/tenants/${of.tenant.id}/keys`)).body,
  };
}

let routes: string[] = [];
let a: Objects;
let b: Objects;
const credentials: Record<string, string> = {};

beforeAll(async () => {
  routes = [...(await documentedRoutes()), ...qstashRoutes()];
  // No request rate limit: the walk makes about a thousand calls in a burst.
  const [ta, tb] = [await createTenant({ requestsPerSecond: null }), await createTenant({ requestsPerSecond: null })];
  const names = (prefix: string) => Array.from({ length: 250 }, (_, i) => `walked-${prefix}-${i}`);
  const [jobA, jobB] = sameShard(await batchJobs(ta, names("a")), await batchJobs(tb, names("b")), (j) => j.shard);
  const [messageA, messageB] = sameShard(
    await batchMessages(ta, 250),
    await batchMessages(tb, 250),
    (id) => shardNamedBy(jobIdOfMessage(id)!)!,
  );
  a = await objectsOf(ta, jobA.id, messageA);
  b = await objectsOf(tb, jobB.id, messageB);
  for (const scope of SCOPES) credentials[scope] = (await makeKey(ta, { scopes: [scope] })).apiKey;
  credentials.prefixed = (await makeKey(ta, { scopes: ["write"], jobPrefix: "walked-" })).apiKey;
  const revoked = await makeKey(ta, { scopes: ["admin"] });
  credentials.revoked = revoked.apiKey;
  const revocation = await ta.api(`/v1/tenants/${ta.id}/keys/${revoked.id}`, { method: "DELETE" });
  expect(revocation.status, await revocation.clone().text()).toBeLessThan(300);
}, 240_000);

describe("the walk's premise", () => {
  it("the objects it names exist for their owner and for nobody else", async () => {
    for (const path of [`/v1/jobs/${a.jobId}`, `/v2/messages/${a.messageId}`, `/v2/dlq/${a.dlqId}`, `/v2/schedules/${a.scheduleId}`]) {
      expect((await a.tenant.api(path)).status, path).toBe(200);
      expect((await b.tenant.api(path)).status, path).toBe(404);
    }
    const count = await env.DB.prepare("SELECT COUNT(*) AS n FROM api_keys WHERE tenant_id = ?").bind(a.tenant.id).first<{ n: number }>();
    expect(count!.n).toBeGreaterThanOrEqual(6);
  });
});

describe("the hostile walk", () => {
  it("knows every route's access, /v1's and /v2's", () => {
    expect(routes.filter((r) => r.startsWith("GET /v1/") || r.startsWith("POST /v1/")).length).toBeGreaterThan(20);
    expect(qstashRoutes().length).toBeGreaterThan(20);
    expect(
      routes.filter((r) => accessOf({ method: r.split(" ")[0]!, path: r.split(" ")[1]! }) === undefined),
      "routes without a row in src/api/route-scopes.ts",
    ).toEqual([]);
  });

  it("another tenant, whose jobs and messages share the shard, learns nothing of a tenant's objects by id or name and changes none", async () => {
    expect(shardNamedBy(jobIdOfMessage(a.messageId)!)).toBe(shardNamedBy(jobIdOfMessage(b.messageId)!));
    const before = await snapshot(a);
    // Ids of A's shapes and shards that nobody holds: B's answer for A's objects must be its answer for these.
    const none = forgedObjects(a);
    const walked: string[] = [];
    for (const route of routes.filter(isIdRoute)) {
      if (accessOf({ method: route.split(" ")[0]!, path: route.split(" ")[1]! }) === "completion-token") continue;
      // B's first key: every scope, the whole tenant; the strongest a tenant's caller holds.
      const forA = requestFor(route, a);
      const answer = await answerOf(await b.tenant.api(forA.path, forA.init));
      const forNone = requestFor(route, none);
      const control = await answerOf(await b.tenant.api(forNone.path, forNone.init));
      expect(answer.status, `${route}: ${answer.text}`).toBeLessThan(500);
      // A name is the tenant's own namespace: B naming A's queue or URL group may make its own
      // (an upsert, an enqueue); what it must never do is reach A's, which the snapshot checks.
      if (/:(name|queue)\b/.test(route)) continue;
      expect(answer.status, `${route}: ${answer.text}`).toBeGreaterThanOrEqual(400);
      expect([answer.status, answer.text], route).toEqual([control.status, unforged(control.text, none, a)]);
      walked.push(route);
    }
    expect(walked.length).toBeGreaterThan(20);
    expect(await snapshot(a)).toEqual(before);
  });

  it("answers every route to every kind of credential as the scope table says", async () => {
    const kinds: Array<[string, Call, Scope[] | "refused", string | null]> = [
      ["no credential", withCredential(null), "refused", null],
      ["junk", withCredential("not-a-key"), "refused", null],
      ["key-shaped junk", (p, i) => withCredential(keyShapedJunk())(p, i), "refused", null],
      ["a revoked key", withCredential(credentials.revoked!), "refused", null],
      ["a read key", withCredential(credentials.read!), ["read"], null],
      ["a prefixed write key", withCredential(credentials.prefixed!), ["write"], "walked-"],
      ["a write key", withCredential(credentials.write!), ["write"], null],
      ["an admin key", withCredential(credentials.admin!), ["admin"], null],
      ["the admin token", withCredential(TOKEN), ["admin"], null],
    ];
    const statuses = new Map<string, number>();
    for (const [kind, call, held, prefix] of kinds) {
      for (const route of routes) {
        const [method, template] = route.split(" ") as [string, string];
        const access = accessOf({ method, path: template }) as RouteAccess;
        const { path, init } = requestFor(route, a);
        const answer = await answerOf(await call(path, init));
        const at = `${route} with ${kind}: ${answer.text.slice(0, 300)}`;
        statuses.set(`${route} ${kind}`, answer.status);
        expect(answer.status, at).not.toBe(500);
        if (access === "completion-token") {
          // A completion needs its attempt's token, which no API credential is.
          expect(answer.status, at).toBeGreaterThanOrEqual(400);
          expect(answer.status, at).toBeLessThan(500);
          continue;
        }
        if (held === "refused") {
          // 429 once the same wrong key failed often enough: its prefix is throttled (sign-in-throttle.ts).
          expect([401, 429], at).toContain(answer.status);
          continue;
        }
        const allowed = grants(held, access.scope) && (prefix === null || access.perJob);
        if (!allowed) {
          expect(answer.status, at).toBe(403);
          if (route.includes(" /v1/")) expect(answer.code, at).toBe("insufficient_scope");
          continue;
        }
        expect(answer.status, at).not.toBe(401);
        expect(answer.code, at).not.toBe("insufficient_scope");
        expect(answer.status === 403 && route.includes(" /v2/"), at).toBe(false);
      }
    }
    // Each kind met some route it could not use, but the admin token, which meets none.
    for (const [kind] of kinds.slice(0, -1))
      expect([...statuses].filter(([k, s]) => k.endsWith(kind) && s >= 401 && s <= 403).length, kind).toBeGreaterThan(0);
  }, 300_000);
});
