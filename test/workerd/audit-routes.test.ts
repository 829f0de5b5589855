import { env, SELF } from "cloudflare:test";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { qstash } from "../../src/api/qstash/app";
import { api, createJob, createTenant, FAR_CRON, receiverPath } from "./helpers";

/**
 * Every change is audited (docs/security.md): every state-changing route of /v1 (each POST, PUT,
 * PATCH and DELETE of /openapi.json) and of /v2 (each of the QStash app's Hono routes) is called
 * once, successfully, and its entry is found in D1's audit_log, naming the caller, the action
 * and the subject. A route that is neither here nor in DATA fails the walk: a new change
 * cannot go unaudited by being forgotten.
 */

const ORIGIN = "https://edgecron.test";
const CHANGING = ["POST", "PUT", "PATCH", "DELETE"];

/** Routes that change no configuration: data, or nothing at all. Each says why. */
const DATA: Record<string, string> = {
  // Reads what a schedule would fire; writes nothing.
  "POST /v1/schedules/preview": "changes nothing",
  // A long-running target reporting on its own run, with the run's completion token: the run's history records it.
  "POST /v1/runs/:id/complete": "a run's report, recorded in its history",
  "POST /v1/runs/:id/heartbeat": "a run's report, recorded in its history",
  // Messages are data, like an object put or a queue send; their runs and attempts are their record (/v2/events).
  "POST /v2/publish/*": "a message is data",
  "POST /v2/enqueue/:queue/*": "a message is data",
  "POST /v2/batch": "a message is data",
  // Cancelling a message is deleting data, as putting it was making it: its log says CANCELED.
  "DELETE /v2/messages/:id": "a message's cancellation is data",
  "DELETE /v2/messages": "a message's cancellation is data",
};

type Doc = { paths: Record<string, Record<string, unknown>> };

async function v1Routes(): Promise<string[]> {
  const doc = (await (await SELF.fetch(`${ORIGIN}/openapi.json`)).json()) as Doc;
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.keys(item)
      .map((m) => m.toUpperCase())
      .filter((m) => CHANGING.includes(m))
      .map((m) => `${m} ${path.replace(/\{(\w+)\}/g, ":$1")}`),
  );
}

function v2Routes(): string[] {
  const routes = qstash.routes.filter((r) => CHANGING.includes(r.method)).map((r) => `${r.method} /v2${r.path}`);
  return [...new Set(routes)];
}

type Tenant = Awaited<ReturnType<typeof createTenant>>;
let tenant: Tenant;
/** Runs that ended dead: dead letters to delete and retry, one per route that takes one. */
let dead: string[] = [];

/** What a route's call must have written. */
interface Expected {
  tenantId?: string;
  actor?: string;
  action: string;
  subject: string;
}

async function ok(res: Response, status = 200): Promise<Record<string, unknown>> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  return text === "" ? {} : (JSON.parse(text) as Record<string, unknown>);
}

const call = (path: string, init: Parameters<typeof api>[1] = {}) => tenant.api(path, init);
const job = async (name: string) =>
  (await createJob({ name: `audit-routes-${name}`, schedule: { cron: "*/5 * * * *" }, target: { url: receiverPath(name) } }, call)).id;
const unique = (what: string) => `${what}-${crypto.randomUUID().slice(0, 8)}`;

async function queue(name: string): Promise<void> {
  await ok(await call("/v2/queues", { method: "POST", json: { queueName: name, parallelism: 2 } }));
}
async function urlGroup(name: string, url = receiverPath("group")): Promise<void> {
  await ok(await call(`/v2/topics/${name}/endpoints`, { method: "POST", json: { endpoints: [{ name: "a", url }] } }));
}
async function schedule(): Promise<string> {
  const res = await call(`/v2/schedules/${receiverPath("schedule")}`, {
    method: "POST",
    headers: { "Upstash-Cron": "0 0 1 1 *" },
    body: "x",
  });
  return (await ok(res)).scheduleId as string;
}
async function jobOfSchedule(scheduleId: string): Promise<string> {
  const row = await env.DB.prepare("SELECT job_id FROM qstash_schedules WHERE tenant_id = ? AND schedule_id = ?")
    .bind(tenant.id, scheduleId)
    .first<{ job_id: string }>();
  return row!.job_id;
}

/** Each state-changing route: a successful call to it, and the entry it must write. */
const CASES: Record<string, () => Promise<Expected>> = {
  "POST /v1/jobs": async () => {
    const res = await call("/v1/jobs", { method: "POST", json: { schedule: FAR_CRON, target: { url: receiverPath("create") } } });
    return { action: "job.create", subject: (await ok(res, 201)).id as string };
  },
  "POST /v1/jobs/batch": async () => {
    const res = await call("/v1/jobs/batch", {
      method: "POST",
      json: { jobs: [{ schedule: FAR_CRON, target: { url: receiverPath("batch") } }] },
    });
    const { results } = (await ok(res)) as { results: Array<{ job: { id: string } }> };
    return { action: "job.create", subject: results[0]!.job.id };
  },
  "PATCH /v1/jobs/:id": async () => {
    const id = await job("patch");
    await ok(await call(`/v1/jobs/${id}`, { method: "PATCH", json: { timeoutMs: 5_000 } }));
    return { action: "job.patch", subject: id };
  },
  "DELETE /v1/jobs/:id": async () => {
    const id = await job("delete");
    await ok(await call(`/v1/jobs/${id}`, { method: "DELETE" }));
    return { action: "job.delete", subject: id };
  },
  "POST /v1/jobs/:id/pause": async () => {
    const id = await job("pause");
    await ok(await call(`/v1/jobs/${id}/pause`, { method: "POST" }));
    return { action: "job.pause", subject: id };
  },
  "POST /v1/jobs/:id/resume": async () => {
    const id = await job("resume");
    await ok(await call(`/v1/jobs/${id}/pause`, { method: "POST" }));
    await ok(await call(`/v1/jobs/${id}/resume`, { method: "POST" }));
    return { action: "job.resume", subject: id };
  },
  "POST /v1/jobs/:id/trigger": async () => {
    const id = await job("trigger");
    await ok(await call(`/v1/jobs/${id}/trigger`, { method: "POST" }), 202);
    return { action: "job.trigger", subject: id };
  },
  "POST /v1/jobs/:id/backfill": async () => {
    const id = await job("backfill");
    const to = Date.now() - 60_000;
    const range = { from: new Date(to - 15 * 60_000).toISOString(), to: new Date(to).toISOString() };
    await ok(await call(`/v1/jobs/${id}/backfill`, { method: "POST", json: range }), 202);
    return { action: "job.backfill", subject: id };
  },
  "POST /v1/runs/:id/retry": async () => {
    const runId = dead.pop()!;
    await ok(await call(`/v1/runs/${runId}/retry`, { method: "POST" }), 202);
    return { action: "run.retry", subject: runId };
  },
  "POST /v1/tenants": async () => {
    const made = await ok(await api("/v1/tenants", { method: "POST", json: { name: unique("audited-tenant") } }), 201);
    return { tenantId: made.id as string, actor: "admin", action: "tenant.create", subject: made.id as string };
  },
  "PATCH /v1/tenants/:id": async () => {
    await ok(await call(`/v1/tenants/${tenant.id}`, { method: "PATCH", json: { notify: null } }));
    return { action: "tenant.update", subject: tenant.id };
  },
  "POST /v1/tenants/:id/keys": async () => {
    const made = await ok(await call(`/v1/tenants/${tenant.id}/keys`, { method: "POST", json: { scopes: ["read"] } }), 201);
    return { action: "key.create", subject: made.id as string };
  },
  "DELETE /v1/tenants/:id/keys/:keyId": async () => {
    const made = await ok(await call(`/v1/tenants/${tenant.id}/keys`, { method: "POST", json: { scopes: ["read"] } }), 201);
    await ok(await call(`/v1/tenants/${tenant.id}/keys/${made.id}`, { method: "DELETE" }));
    return { action: "key.revoke", subject: made.id as string };
  },
  "PATCH /v1/signing-keys": async () => {
    // A change either way: one of the two is one, whatever the tenant sends now.
    await ok(await call("/v1/signing-keys", { method: "PATCH", json: { legacySignature: true } }));
    await ok(await call("/v1/signing-keys", { method: "PATCH", json: { legacySignature: false } }));
    return { action: "signing.schemes", subject: tenant.id };
  },
  "POST /v1/signing-keys/rotate": async () => {
    await ok(await call("/v1/signing-keys/rotate", { method: "POST" }));
    return { action: "signing.rotate", subject: tenant.id };
  },

  "POST /v2/schedules/*": async () => ({ action: "schedule.create", subject: await schedule() }),
  // A schedule is a job: pausing it pauses its job, audited as /v1 audits that.
  "PATCH /v2/schedules/:id/pause": async () => {
    const id = await schedule();
    await ok(await call(`/v2/schedules/${id}/pause`, { method: "PATCH" }));
    return { action: "job.pause", subject: await jobOfSchedule(id) };
  },
  "POST /v2/schedules/:id/pause": async () => {
    const id = await schedule();
    await ok(await call(`/v2/schedules/${id}/pause`, { method: "POST" }));
    return { action: "job.pause", subject: await jobOfSchedule(id) };
  },
  "PATCH /v2/schedules/:id/resume": async () => {
    const id = await schedule();
    await ok(await call(`/v2/schedules/${id}/pause`, { method: "PATCH" }));
    await ok(await call(`/v2/schedules/${id}/resume`, { method: "PATCH" }));
    return { action: "job.resume", subject: await jobOfSchedule(id) };
  },
  "POST /v2/schedules/:id/resume": async () => {
    const id = await schedule();
    await ok(await call(`/v2/schedules/${id}/pause`, { method: "POST" }));
    await ok(await call(`/v2/schedules/${id}/resume`, { method: "POST" }));
    return { action: "job.resume", subject: await jobOfSchedule(id) };
  },
  "DELETE /v2/schedules/:id": async () => {
    const id = await schedule();
    await ok(await call(`/v2/schedules/${id}`, { method: "DELETE" }));
    return { action: "schedule.delete", subject: id };
  },
  "DELETE /v2/dlq/:id": async () => {
    const id = dead.pop()!;
    await ok(await call(`/v2/dlq/${id}`, { method: "DELETE" }));
    return { action: "dlq.delete", subject: id };
  },
  "DELETE /v2/dlq": async () => {
    const id = dead.pop()!;
    expect(await ok(await call(`/v2/dlq?dlqIds=${id}`, { method: "DELETE" }))).toEqual({ deleted: 1 });
    return { action: "dlq.delete", subject: id };
  },
  // A dead letter's retry is its run's retry.
  "POST /v2/dlq/retry": async () => {
    const id = dead.pop()!;
    await ok(await call(`/v2/dlq/retry?dlqIds=${id}`, { method: "POST" }));
    return { action: "run.retry", subject: id };
  },
  "POST /v2/keys/rotate": async () => {
    await ok(await call("/v2/keys/rotate", { method: "POST" }));
    return { action: "signing.rotate", subject: tenant.id };
  },
  "POST /v2/queues": async () => {
    const name = unique("queue");
    await queue(name);
    return { action: "queue.create", subject: name };
  },
  "DELETE /v2/queues/:name": async () => {
    const name = unique("queue");
    await queue(name);
    await ok(await call(`/v2/queues/${name}`, { method: "DELETE" }));
    return { action: "queue.delete", subject: name };
  },
  "POST /v2/queues/:name/pause": async () => {
    const name = unique("queue");
    await queue(name);
    await ok(await call(`/v2/queues/${name}/pause`, { method: "POST" }));
    return { action: "queue.pause", subject: name };
  },
  "POST /v2/queues/:name/resume": async () => {
    const name = unique("queue");
    await queue(name);
    await ok(await call(`/v2/queues/${name}/pause`, { method: "POST" }));
    await ok(await call(`/v2/queues/${name}/resume`, { method: "POST" }));
    return { action: "queue.resume", subject: name };
  },
  "POST /v2/topics/:name/endpoints": async () => {
    const name = unique("group");
    await urlGroup(name);
    return { action: "urlgroup.endpoints.add", subject: name };
  },
  "DELETE /v2/topics/:name/endpoints": async () => {
    const name = unique("group");
    await urlGroup(name);
    await ok(await call(`/v2/topics/${name}/endpoints`, { method: "DELETE", json: { endpoints: [{ name: "a" }] } }));
    return { action: "urlgroup.endpoints.remove", subject: name };
  },
  "DELETE /v2/topics/:name": async () => {
    const name = unique("group");
    await urlGroup(name);
    await ok(await call(`/v2/topics/${name}`, { method: "DELETE" }));
    return { action: "urlgroup.delete", subject: name };
  },
};

async function entriesOf(tenantId: string, action: string, subject: string) {
  const { results } = await env.DB.prepare("SELECT * FROM audit_log WHERE tenant_id = ? AND action = ? AND subject = ? ORDER BY id")
    .bind(tenantId, action, subject)
    .all<{ actor: string; at: number; change: string }>();
  return results.map((r) => ({ ...r, change: JSON.parse(r.change) as { before: unknown; after: unknown } }));
}

/** Publishes messages to a target that always fails, with no retry, and waits until each is a dead letter. */
async function deadLetters(count: number, name = "audit-dead"): Promise<string[]> {
  const url = receiverPath(name, "status=500");
  const ids = new Set<string>();
  for (let i = 0; i < count; i++) {
    const res = await call(`/v2/publish/${url}`, { method: "POST", headers: { "Upstash-Retries": "0" }, body: "x" });
    ids.add((await ok(res)).messageId as string);
  }
  return vi.waitFor(
    async () => {
      const { messages } = (await ok(await call("/v2/dlq"))) as { messages: Array<{ dlqId: string; messageId: string }> };
      const ours = messages.filter((m) => ids.has(m.messageId));
      expect(ours).toHaveLength(count);
      return ours.map((m) => m.dlqId);
    },
    { timeout: 20_000, interval: 200 },
  );
}

beforeAll(async () => {
  tenant = await createTenant({ requestsPerSecond: null });
  dead = await deadLetters(4);
});

describe("the audit log and the routes that change things", () => {
  it("every state-changing route of /v1 and /v2 is walked here, or said to be data", async () => {
    const routes = [...(await v1Routes()), ...v2Routes()];
    expect(routes.length).toBeGreaterThan(30);
    const unwalked = routes.filter((r) => !(r in CASES) && !(r in DATA));
    expect(unwalked, "state-changing routes with no audit case here: audit them, then add them to CASES").toEqual([]);
    const stale = [...Object.keys(CASES), ...Object.keys(DATA)].filter((r) => !routes.includes(r));
    expect(stale, "cases of routes that do not exist").toEqual([]);
  });

  it("each writes its entry: the caller, the action, the subject", async () => {
    const missing: string[] = [];
    for (const [route, run] of Object.entries(CASES)) {
      const since = Date.now();
      const expected = await run();
      const entries = (await entriesOf(expected.tenantId ?? tenant.id, expected.action, expected.subject)).filter((e) => e.at >= since);
      if (entries.length === 0) {
        missing.push(`${route}: no ${expected.action} of ${expected.subject}`);
        continue;
      }
      for (const e of entries) expect(e.actor, route).toBe(expected.actor ?? tenant.keyId);
    }
    expect(missing).toEqual([]);
  });
});

describe("what a /v2 change's entry says", () => {
  const PATH_SECRET = "pathsecret7f3a";
  const QUERY_SECRET = "querysecret9b2c";
  const USER_SECRET = "usersecret4d1e";

  it("an endpoint added to a URL group is named by its name and origin; no part of its URL that may hold a token is kept", async () => {
    const name = unique("leaky-group");
    const plain = new URL(receiverPath(`group-${PATH_SECRET}`));
    const url = `${plain.protocol}//u:${USER_SECRET}@${plain.host}${plain.pathname}?token=${QUERY_SECRET}`;
    await ok(await call(`/v2/topics/${name}/endpoints`, { method: "POST", json: { endpoints: [{ name: "mine", url }] } }));
    await ok(await call(`/v2/topics/${name}/endpoints`, { method: "DELETE", json: { endpoints: [{ url }] } }));
    await urlGroup(name);
    await ok(await call(`/v2/topics/${name}`, { method: "DELETE" }));
    const [added] = await entriesOf(tenant.id, "urlgroup.endpoints.add", name);
    expect(added!.change).toEqual({
      before: null,
      after: { added: [{ name: "mine", origin: plain.origin }], endpoints: [{ name: "mine", origin: plain.origin }] },
    });
    const [removed] = await entriesOf(tenant.id, "urlgroup.endpoints.remove", name);
    expect(removed!.change).toEqual({
      before: { endpoints: [{ name: "mine", origin: plain.origin }] },
      after: { removed: [{ name: "mine", origin: plain.origin }], endpoints: [] },
    });
    const [deleted] = await entriesOf(tenant.id, "urlgroup.delete", name);
    expect(deleted!.change).toEqual({ before: { endpoints: [{ name: "a", origin: plain.origin }] }, after: null });
    const log = JSON.stringify(
      (await env.DB.prepare("SELECT * FROM audit_log WHERE tenant_id = ? AND subject = ?").bind(tenant.id, name).all()).results,
    );
    for (const secret of [PATH_SECRET, QUERY_SECRET, USER_SECRET]) expect(log).not.toContain(secret);
  });

  it("a queue's entries say what it was and what it is; a pause of a paused queue is no change and writes none", async () => {
    const name = unique("queue");
    await ok(await call("/v2/queues", { method: "POST", json: { queueName: name, parallelism: 3 } }));
    await ok(await call("/v2/queues", { method: "POST", json: { queueName: name, parallelism: 5, paused: true } }));
    await ok(await call(`/v2/queues/${name}/pause`, { method: "POST" }));
    await ok(await call(`/v2/queues/${name}/resume`, { method: "POST" }));
    await ok(await call(`/v2/queues/${name}`, { method: "DELETE" }));
    const { results } = await env.DB.prepare("SELECT action, change FROM audit_log WHERE tenant_id = ? AND subject = ? ORDER BY id")
      .bind(tenant.id, name)
      .all<{ action: string; change: string }>();
    expect(results.map((r) => [r.action, JSON.parse(r.change)])).toEqual([
      ["queue.create", { before: null, after: { parallelism: 3, paused: false } }],
      ["queue.update", { before: { parallelism: 3, paused: false }, after: { parallelism: 5, paused: true } }],
      ["queue.resume", { before: { paused: true }, after: { paused: false } }],
      ["queue.delete", { before: { parallelism: 5, paused: false }, after: null }],
    ]);
  });

  it("a schedule's entries name the job its id runs as, and the destination's origin only", async () => {
    const target = receiverPath(`schedule-${PATH_SECRET}`, `token=${QUERY_SECRET}`);
    const create = (id?: string) =>
      call(`/v2/schedules/${target}`, {
        method: "POST",
        headers: { "Upstash-Cron": "0 0 1 1 *", ...(id !== undefined && { "Upstash-Schedule-Id": id }) },
        body: "x",
      });
    const id = (await ok(await create())).scheduleId as string;
    const first = await jobOfSchedule(id);
    await ok(await create(id));
    const second = await jobOfSchedule(id);
    await ok(await call(`/v2/schedules/${id}`, { method: "DELETE" }));
    const origin = new URL(target).origin;
    const { results } = await env.DB.prepare("SELECT action, change FROM audit_log WHERE tenant_id = ? AND subject = ? ORDER BY id")
      .bind(tenant.id, id)
      .all<{ action: string; change: string }>();
    expect(results.map((r) => [r.action, JSON.parse(r.change)])).toEqual([
      ["schedule.create", { before: null, after: { jobId: first, origin, cron: "0 0 1 1 *" } }],
      ["schedule.update", { before: { jobId: first }, after: { jobId: second, origin, cron: "0 0 1 1 *" } }],
      ["schedule.delete", { before: { jobId: second }, after: null }],
    ]);
    // The jobs are audited as jobs: the second made, the first deleted when it was replaced, the second with the schedule.
    const jobActions = async (jobId: string) =>
      (
        await env.DB.prepare("SELECT action FROM audit_log WHERE tenant_id = ? AND subject = ? ORDER BY id")
          .bind(tenant.id, jobId)
          .all<{ action: string }>()
      ).results.map((r) => r.action);
    expect(await jobActions(first)).toEqual(["job.create", "job.delete"]);
    expect(await jobActions(second)).toEqual(["job.create", "job.delete"]);
  });

  it("a refused change writes no entry: an unknown queue, group or dead letter, a bad body", async () => {
    const count = async () =>
      (await env.DB.prepare("SELECT COUNT(*) AS n FROM audit_log WHERE tenant_id = ?").bind(tenant.id).first<{ n: number }>())!.n;
    const before = await count();
    const name = unique("nothing");
    expect((await call(`/v2/queues/${name}/pause`, { method: "POST" })).status).toBe(404);
    expect((await call(`/v2/queues/${name}`, { method: "DELETE" })).status).toBe(404);
    expect((await call(`/v2/topics/${name}`, { method: "DELETE" })).status).toBe(404);
    expect((await call(`/v2/topics/${name}/endpoints`, { method: "DELETE", json: { endpoints: [{ name: "a" }] } })).status).toBe(404);
    expect((await call(`/v2/topics/${name}/endpoints`, { method: "POST", json: { endpoints: [{ name: "a" }] } })).status).toBe(400);
    expect((await call("/v2/dlq/run_00000000000000000000000_00000000", { method: "DELETE" })).status).toBe(404);
    expect((await call("/v2/schedules/scd_nothing", { method: "DELETE" })).status).toBe(404);
    expect(await count()).toBe(before);
  });
});

describe("a change and its entry are one D1 transaction", () => {
  /** Makes D1 refuse this tenant's entries of `action`, as a failure of the entry's statement would. */
  async function refuseEntries(action: string): Promise<() => Promise<void>> {
    const trigger = `refuse_${action.replace(/\W/g, "_")}`;
    await env.DB.prepare(
      `CREATE TRIGGER ${trigger} BEFORE INSERT ON audit_log
       WHEN NEW.tenant_id = '${tenant.id}' AND NEW.action = '${action}' BEGIN SELECT RAISE(ABORT, 'refused'); END`,
    ).run();
    return async () => void (await env.DB.prepare(`DROP TRIGGER ${trigger}`).run());
  }

  it("an entry that cannot be written leaves the change unmade: queue, URL group, schedule, dead letter", async () => {
    const name = unique("atomic");
    let undo = await refuseEntries("queue.create");
    expect((await call("/v2/queues", { method: "POST", json: { queueName: name } })).status).toBe(503);
    await undo();
    expect((await call(`/v2/queues/${name}`)).status).toBe(404);

    undo = await refuseEntries("urlgroup.endpoints.add");
    const endpoints = [{ url: receiverPath("atomic") }];
    expect((await call(`/v2/topics/${name}/endpoints`, { method: "POST", json: { endpoints } })).status).toBe(503);
    await undo();
    expect((await call(`/v2/topics/${name}`)).status).toBe(404);

    const scheduleId = await schedule();
    undo = await refuseEntries("schedule.delete");
    expect((await call(`/v2/schedules/${scheduleId}`, { method: "DELETE" })).status).toBe(503);
    await undo();
    expect(await env.DB.prepare("SELECT 1 FROM qstash_schedules WHERE schedule_id = ?").bind(scheduleId).first()).not.toBeNull();

    const [letter] = await deadLetters(1, "atomic-dead");
    undo = await refuseEntries("dlq.delete");
    expect((await call(`/v2/dlq/${letter}`, { method: "DELETE" })).status).toBe(503);
    await undo();
    expect((await call(`/v2/dlq/${letter}`)).status).toBe(200);
  });
});
