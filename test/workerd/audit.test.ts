import { env } from "cloudflare:test";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { api, createTenant, receiverPath, TOKEN } from "./helpers";

/**
 * The audit log (docs/security.md): every change made through the API is recorded with who
 * (the key's id, never the key), when, what, from where and the change, secrets redacted; it is
 * read through GET /v1/audit with filters and a cursor. And secrets are looked for in every
 * answer and every log line of a tenant's whole session: none may appear.
 */

type Entry = {
  id: string;
  tenantId: string;
  at: string;
  actor: string;
  action: string;
  subject: string;
  client: string | null;
  change: { before: unknown; after: unknown };
};
type Page = { items: Entry[]; nextCursor: string | null };

const HEADER_SECRET = `hdr-${crypto.randomUUID()}`;
const BODY_SECRET = `body-${crypto.randomUUID()}`;
const QUERY_SECRET = `qs-${crypto.randomUUID()}`;
/** A credential in a URL's path, as a chat webhook carries its own: the URL is sealed whole. */
const PATH_SECRET = `ps-${crypto.randomUUID()}`;
const ADDRESS = "192.0.2.44";

let tenant: Awaited<ReturnType<typeof createTenant>>;
/** Every answer, but those of the routes whose purpose is to hand a secret over (the signing secrets). */
const answers: string[] = [];
const logLines: string[] = [];

/** The tenant's key, from a known address; every answer is kept to be searched for secrets. */
async function call(path: string, init: Parameters<typeof api>[1] = {}, key = tenant.apiKey): Promise<Response> {
  const res = await api(path, {
    ...init,
    headers: { ...Object.fromEntries(new Headers(init.headers)), Authorization: `Bearer ${key}`, "CF-Connecting-IP": ADDRESS },
  });
  if (!path.startsWith("/v1/signing-keys"))
    answers.push([...res.headers].map(([k, v]) => `${k}: ${v}`).join("\n"), await res.clone().text());
  return res;
}

async function auditOf(query: string, key = tenant.apiKey): Promise<Page> {
  const res = await call(`/v1/audit?${query}`, {}, key);
  expect(res.status, await res.clone().text()).toBe(200);
  return res.json();
}

beforeAll(async () => {
  for (const level of ["log", "info", "warn", "error", "debug"] as const) {
    vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
      logLines.push(
        args.map((a) => (a instanceof Error ? `${a.message} ${a.stack}` : typeof a === "string" ? a : JSON.stringify(a))).join(" "),
      );
    });
  }
  tenant = await createTenant({ requestsPerSecond: null });
});

describe("the audit log", () => {
  let jobId = "";

  it("records every change with who, when, what, from where and the change, its secrets redacted", async () => {
    const created = await call("/v1/jobs", {
      method: "POST",
      json: {
        name: "audited",
        schedule: { cron: "0 0 1 1 *" },
        target: {
          url: `${receiverPath(`audit-${PATH_SECRET}`)}?token=${QUERY_SECRET}`,
          method: "POST",
          headers: { Authorization: `Bearer ${HEADER_SECRET}` },
          body: { secret: BODY_SECRET },
        },
        breaker: false,
      },
    });
    expect(created.status, await created.clone().text()).toBe(201);
    jobId = ((await created.json()) as { id: string }).id;
    expect((await call(`/v1/jobs/${jobId}`, { method: "PATCH", json: { timeoutMs: 5_000 } })).status).toBe(200);
    expect((await call(`/v1/jobs/${jobId}/pause`, { method: "POST" })).status).toBe(200);
    expect((await call(`/v1/jobs/${jobId}/resume`, { method: "POST" })).status).toBe(200);
    expect((await call(`/v1/jobs/${jobId}/trigger`, { method: "POST" })).status).toBe(202);
    const key = await call(`/v1/tenants/${tenant.id}/keys`, { method: "POST", json: { scopes: ["read"] } });
    const keyId = ((await key.json()) as { id: string }).id;
    expect((await call(`/v1/tenants/${tenant.id}/keys/${keyId}`, { method: "DELETE" })).status).toBe(200);
    expect((await call("/v1/signing-keys/rotate", { method: "POST" })).status).toBe(200);
    expect((await call(`/v1/tenants/${tenant.id}`, { method: "PATCH", json: { notify: null } })).status).toBe(200);
    expect((await call(`/v1/jobs/${jobId}`, { method: "DELETE" })).status).toBe(200);

    const { items } = await auditOf("limit=50");
    expect(items.map((e) => e.action)).toEqual([
      "job.delete",
      "tenant.update",
      "signing.rotate",
      "key.revoke",
      "key.create",
      "job.trigger",
      "job.resume",
      "job.pause",
      "job.patch",
      "job.create",
      "tenant.create",
    ]);
    // The tenant was made by the admin token; the rest by the tenant's key.
    expect(items.at(-1)).toMatchObject({ actor: "admin", subject: tenant.id });
    for (const e of items.slice(0, -1)) {
      expect(e, e.action).toMatchObject({ tenantId: tenant.id, actor: tenant.keyId, client: ADDRESS });
      expect(Date.parse(e.at)).toBeGreaterThan(Date.now() - 60_000);
    }
    const patch = items.find((e) => e.action === "job.patch")!;
    expect(patch.subject).toBe(jobId);
    expect(patch.change).toMatchObject({ before: { spec: { target: { secrets: "[sealed]" } } }, after: { spec: { timeoutMs: 5_000 } } });
    expect(items.find((e) => e.action === "job.pause")!.change).toEqual({ before: { paused: false }, after: { paused: true } });
    expect(items.find((e) => e.action === "key.create")!.change.after).toMatchObject({ id: keyId, scopes: ["read"] });
    // The target URL is sealed with the rest: the entry keeps its origin, none of its path or query.
    const target = (patch.change.before as { spec: { target: Record<string, unknown> } }).spec.target;
    expect(target).not.toHaveProperty("url");
    expect(target.origin).toBe(new URL(env.RECEIVER_URL).origin);
  });

  it("filters by action, kind of action, subject and time, and pages newest first with a cursor", async () => {
    expect((await auditOf("action=job.pause")).items.map((e) => e.action)).toEqual(["job.pause"]);
    expect((await auditOf("action=key")).items.map((e) => e.action)).toEqual(["key.revoke", "key.create"]);
    expect((await auditOf(`subject=${jobId}`)).items.every((e) => e.subject === jobId)).toBe(true);
    expect((await auditOf(`since=${new Date(Date.now() + 60_000).toISOString()}`)).items).toEqual([]);
    const all = (await auditOf("limit=200")).items;
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: Page = await auditOf(`limit=3${cursor ? `&cursor=${cursor}` : ""}`);
      seen.push(...page.items.map((e) => e.id));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual(all.map((e) => e.id));
  });

  it("a batch records each job it created, and a creation the quota refused records nothing", async () => {
    const small = await createTenant({ maxJobs: 2, requestsPerSecond: null });
    const job = (name: string) => ({ name, schedule: { cron: "0 0 1 1 *" }, target: { url: receiverPath("audit-batch") }, breaker: false });
    const res = await call("/v1/jobs/batch", { method: "POST", json: { jobs: [job("a"), job("b"), job("c")] } }, small.apiKey);
    expect(res.status, await res.clone().text()).toBe(200);
    const refused = await call("/v1/jobs", { method: "POST", json: job("d") }, small.apiKey);
    expect(refused.status).toBe(403);
    const created = (await auditOf("action=job.create", small.apiKey)).items;
    expect(created.map((e) => (e.change.after as { name: string }).name).sort()).toEqual(["a", "b"]);
  });

  it("refuses bad filters with 400 naming the field, and is another tenant's to nobody", async () => {
    const bad = await call("/v1/audit?action=DROP%20TABLE");
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain("action");
    expect((await call("/v1/audit?cursor=nope")).status).toBe(400);
    const other = await createTenant();
    const theirs = await auditOf("limit=200", other.apiKey);
    expect(theirs.items.every((e) => e.tenantId === other.id)).toBe(true);
    expect(theirs.items.map((e) => e.action)).toEqual(["tenant.create"]);
    // A key naming another tenant still reads only its own.
    expect((await auditOf(`tenantId=${tenant.id}`, other.apiKey)).items.every((e) => e.tenantId === other.id)).toBe(true);
    // The admin token reads any tenant's.
    const admin = (await (await api(`/v1/audit?tenantId=${tenant.id}&action=job.create`)).json()) as Page;
    expect(admin.items.map((e) => e.subject)).toEqual([jobId]);
  });

  it("no secret appears in any answer or any log line of all of the above", async () => {
    const signing = (await (await api(`/v1/signing-keys?tenantId=${tenant.id}`)).json()) as { current: string; next: string };
    // Searched for only after everything above: reading the secrets is itself an answer with them.
    const haystack = [...answers, ...logLines].join("\n");
    expect(answers.length).toBeGreaterThan(20);
    for (const secret of [HEADER_SECRET, tenant.apiKey, signing.current, signing.next, TOKEN]) {
      expect(haystack.includes(secret), `a secret (${secret.slice(0, 6)}…) in an answer or a log line`).toBe(false);
    }
    // A job's body is shown to its own tenant with the job (it is the tenant's); never in the log or the audit.
    const audit = JSON.stringify(await auditOf("limit=200"));
    for (const secret of [BODY_SECRET, QUERY_SECRET, PATH_SECRET]) {
      expect([audit, ...logLines].join("\n").includes(secret), `${secret.slice(0, 6)}… in the audit log or a log line`).toBe(false);
    }
  });
});
