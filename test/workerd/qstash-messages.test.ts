/**
 * A QStash message is a one-off run that its shard alone holds (docs/qstash.md): no catalog
 * row, so no quota and no audit entry; read, cancelled, listed and dead-lettered through its
 * shard; gone with its run once retention removes that. Against the real D1, shards and Queue.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { jobIdOfMessage } from "../../src/qstash/ids";
import type { Shard } from "../../src/shard/shard";
import { STANDALONE_OF_TENANT_SQL } from "../../src/shard/view-store";
import { createTenant, hitsOf, receiverPath, runRetention, shardOf } from "./helpers";
import { deadLetterIds, messageRow, messageShard } from "./messages";

type Tenant = Awaited<ReturnType<typeof createTenant>>;

async function publish(tenant: Tenant, url: string, headers: Record<string, string> = {}): Promise<string> {
  const res = await tenant.api(`/v2/publish/${url}`, { method: "POST", headers: { "Content-Type": "text/plain", ...headers }, body: "hi" });
  expect(res.status, await res.clone().text()).toBe(200);
  return ((await res.json()) as { messageId: string }).messageId;
}

async function catalogJobs(tenantId: string): Promise<number> {
  return (await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = ?").bind(tenantId).first<{ n: number }>())!.n;
}

async function eventsOf(tenant: Tenant, messageId: string): Promise<Array<{ state: string }>> {
  const res = await tenant.api(`/v2/events?messageIds=${messageId}`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { events: Array<{ state: string }> }).events;
}

describe("a QStash message", () => {
  it("is held by its shard alone: no catalog row, no quota, no audit entry; shown, and delivered", async () => {
    const tenant = await createTenant({ maxJobs: 1 });
    const now = receiverPath("standalone-now");
    const ids = [await publish(tenant, now), await publish(tenant, receiverPath("later"), { "Upstash-Delay": "1h" })];
    // A third over maxJobs: messages are not jobs of the catalog.
    ids.push(await publish(tenant, receiverPath("later"), { "Upstash-Delay": "1h" }));
    expect(await catalogJobs(tenant.id)).toBe(0);
    const audit = await env.DB.prepare("SELECT COUNT(*) AS n FROM audit_log WHERE tenant_id = ? AND action = 'job.create'")
      .bind(tenant.id)
      .first<{ n: number }>();
    expect(audit!.n).toBe(0);
    for (const id of ids) expect((await messageRow(jobIdOfMessage(id)!))?.standalone).toBe(1);
    // Its quota is whole for its jobs.
    const job = await tenant.api("/v1/jobs", {
      method: "POST",
      json: { schedule: { cron: "0 0 1 1 *" }, target: { url: now }, breaker: false },
    });
    expect(job.status, await job.clone().text()).toBe(201);
    expect(((await (await tenant.api("/v1/jobs")).json()) as { items: unknown[] }).items).toHaveLength(1);

    const shown = await tenant.api(`/v2/messages/${ids[1]}`);
    expect(shown.status).toBe(200);
    expect(await shown.json()).toMatchObject({ messageId: ids[1], body: "hi" });
    await vi.waitFor(async () => expect(await hitsOf(now)).toHaveLength(1), { timeout: 15_000, interval: 100 });
    await vi.waitFor(async () => expect((await eventsOf(tenant, ids[0]!)).map((e) => e.state)).toContain("DELIVERED"), {
      timeout: 10_000,
      interval: 100,
    });
    // Another tenant sees none of it.
    const other = await createTenant();
    expect((await other.api(`/v2/messages/${ids[1]}`)).status).toBe(404);
    expect(await eventsOf(other, ids[0]!)).toEqual([]);
  });

  it("a tenant's messages are listed from their index, never from a walk of the shard's jobs", async () => {
    const tenant = await createTenant();
    const id = await publish(tenant, receiverPath("standalone-plan"), { "Upstash-Delay": "1h" });
    const plan = await runInDurableObject(shardOf(messageShard(jobIdOfMessage(id)!)), (_s: Shard, state) =>
      state.storage.sql
        .exec(`EXPLAIN QUERY PLAN ${STANDALONE_OF_TENANT_SQL}`, tenant.id, "~", 50)
        .toArray()
        .map((r) => r.detail as string),
    );
    expect(plan).toEqual([expect.stringMatching(/^SEARCH jobs USING (COVERING )?INDEX jobs_standalone \(tenant_id=\? AND id<\?\)$/)]);
  });

  it("is cancelled through its shard, by id and by filter, and is never delivered", async () => {
    const tenant = await createTenant();
    const url = receiverPath("standalone-cancel");
    const a1 = await publish(tenant, url, { "Upstash-Delay": "2s", "Upstash-Label": "a" });
    const a2 = await publish(tenant, url, { "Upstash-Delay": "2s", "Upstash-Label": "a" });
    const b = await publish(tenant, url, { "Upstash-Delay": "1h", "Upstash-Label": "b" });
    const keep = await publish(tenant, url, { "Upstash-Delay": "1h", "Upstash-Label": "keep" });

    const byFilter = await tenant.api("/v2/messages?label=a", { method: "DELETE" });
    expect(await byFilter.json()).toEqual({ cancelled: 2 });
    const byId = await tenant.api(`/v2/messages/${b}`, { method: "DELETE" });
    expect(await byId.json()).toEqual({ cancelled: 1 });
    for (const id of [a1, a2, b]) {
      expect((await tenant.api(`/v2/messages/${id}`)).status).toBe(404);
      expect((await messageRow(jobIdOfMessage(id)!))?.deleted).toBe(1);
    }
    expect((await tenant.api(`/v2/messages/${keep}`)).status).toBe(200);
    expect((await tenant.api(`/v2/messages/${b}`, { method: "DELETE" })).status).toBe(404);
    // Past the cancelled messages' due time: none was delivered.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    expect(await hitsOf(url)).toEqual([]);
  });

  it("ends in the dead letters, read and retried through its shard", async () => {
    const tenant = await createTenant();
    const url = receiverPath("standalone-dead", "status=500");
    const id = await publish(tenant, url, { "Upstash-Retries": "0" });
    const letters = await vi.waitFor(
      async () => {
        const res = await tenant.api("/v2/dlq");
        const { messages } = (await res.json()) as { messages: Array<{ dlqId: string; messageId: string; url: string }> };
        expect(messages).toHaveLength(1);
        return messages;
      },
      { timeout: 15_000, interval: 200 },
    );
    expect(letters[0]).toMatchObject({ messageId: id, url });
    const one = await tenant.api(`/v2/dlq/${letters[0]!.dlqId}`);
    expect(one.status).toBe(200);
    // Its run is edgecron's too: /v1/runs reads it through the shard.
    const run = await tenant.api(`/v1/runs/${letters[0]!.dlqId}`);
    expect(run.status).toBe(200);
    expect(await run.json()).toMatchObject({ state: "dead" });
    const retried = await tenant.api("/v2/dlq/retry", { method: "POST", json: { dlqIds: [letters[0]!.dlqId] } });
    expect(retried.status, await retried.clone().text()).toBe(200);
    await vi.waitFor(async () => expect(await hitsOf(url)).toHaveLength(2), { timeout: 15_000, interval: 100 });
  });

  it("leaves its shard with its run when retention removes that", async () => {
    const tenant = await createTenant();
    const url = receiverPath("standalone-retention");
    const id = await publish(tenant, url);
    const later = await publish(tenant, receiverPath("standalone-retention-later"), { "Upstash-Delay": "1h" });
    await vi.waitFor(async () => expect((await eventsOf(tenant, id)).map((e) => e.state)).toContain("DELIVERED"), {
      timeout: 15_000,
      interval: 100,
    });
    const jobId = jobIdOfMessage(id)!;
    const stub = shardOf(messageShard(jobId));
    // Its run is older than any retention.
    await runInDurableObject(stub, (_s: Shard, state) => {
      state.storage.sql.exec("UPDATE runs SET scheduled_at = 1, finished_at = 2 WHERE job_id = ?", jobId);
    });
    await runRetention(stub);
    // A pass walks up to 100 jobs from its cursor: a second one reaches any the first left.
    if (await messageRow(jobId)) await runRetention(stub);
    expect(await messageRow(jobId)).toBeNull();
    expect((await tenant.api(`/v2/messages/${id}`)).status).toBe(404);
    // A message not yet delivered stays.
    expect((await tenant.api(`/v2/messages/${later}`)).status).toBe(200);
  });
});

describe("a bulk call by ids", () => {
  /** One more id than a request may name, the real one among them. */
  const tooMany = (name: string, real: string) =>
    [real, ...Array.from({ length: 100 }, (_, i) => `${real.slice(0, -4)}${String(i).padStart(4, "0")}`)]
      .map((id) => `${name}=${id}`)
      .join("&");

  it("of more than 100 messageIds is refused with a 400 naming the field and the cap, and cancels none", async () => {
    const tenant = await createTenant();
    const id = await publish(tenant, receiverPath("bulk-cap"), { "Upstash-Delay": "1h" });
    const res = await tenant.api(`/v2/messages?${tooMany("messageIds", id)}`, { method: "DELETE" });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/^messageIds: at most 100 ids in one request \(101 given\)/);
    expect((await tenant.api(`/v2/messages/${id}`)).status).toBe(200);
    for (const path of ["/v2/events", "/v2/dlq"]) {
      const name = path === "/v2/dlq" ? "dlqIds" : "messageIds";
      const answer = await tenant.api(`${path}?${tooMany(name, id)}`);
      expect(answer.status, path).toBe(400);
      expect(((await answer.json()) as { error: string }).error, path).toContain(`${name}: at most 100 ids`);
    }
    // 100 are taken.
    const hundred = `${tooMany("messageIds", id).split("&").slice(0, 100).join("&")}`;
    expect(await (await tenant.api(`/v2/messages?${hundred}`, { method: "DELETE" })).json()).toEqual({ cancelled: 1 });
  });

  it.each([
    ["DELETE", "/v2/dlq"],
    ["POST", "/v2/dlq/retry"],
  ])("%s %s with more than 100 dlqIds is refused with a 400, the dead letter left as it was", async (method, path) => {
    const tenant = await createTenant();
    const url = receiverPath(`dlq-cap-${method}`, "status=500");
    await publish(tenant, url, { "Upstash-Retries": "0" });
    const [dlqId] = (await deadLetterIds(tenant, 1, 15_000)) as [string];
    const res = await tenant.api(`${path}?${tooMany("dlqIds", dlqId)}`, { method });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/^dlqIds: at most 100 ids in one request \(101 given\)/);
    expect((await tenant.api(`/v2/dlq/${dlqId}`)).status).toBe(200);
    expect(await hitsOf(url)).toHaveLength(1);
  });
});

describe("a bulk change naming its ids in a JSON body (the older SDK's deleteMany)", () => {
  async function twoDeadLetters(tenant: Tenant, name: string): Promise<string[]> {
    for (const i of [1, 2]) await publish(tenant, receiverPath(`${name}-${i}`, "status=500"), { "Upstash-Retries": "0" });
    return deadLetterIds(tenant, 2, 15_000);
  }

  it("cancels the messages named, not every message the empty filter finds", async () => {
    const tenant = await createTenant();
    const named = await publish(tenant, receiverPath("body-ids"), { "Upstash-Delay": "1h" });
    const other = await publish(tenant, receiverPath("body-ids"), { "Upstash-Delay": "1h" });
    const res = await tenant.api("/v2/messages", { method: "DELETE", json: { messageIds: [named] } });
    expect(await res.json()).toEqual({ cancelled: 1 });
    expect((await tenant.api(`/v2/messages/${named}`)).status).toBe(404);
    expect((await tenant.api(`/v2/messages/${other}`)).status).toBe(200);
  });

  it("deletes and retries the dead letters named, and no other", async () => {
    const tenant = await createTenant();
    const [first, second] = await twoDeadLetters(tenant, "body-dlq");
    const deleted = await tenant.api("/v2/dlq", { method: "DELETE", json: { dlqIds: [first] } });
    expect(await deleted.json()).toEqual({ deleted: 1 });
    expect((await tenant.api(`/v2/dlq/${second}`)).status).toBe(200);
    const retried = await tenant.api("/v2/dlq/retry", { method: "POST", json: { dlqIds: [second] } });
    expect(((await retried.json()) as { responses: unknown[] }).responses).toHaveLength(1);
  });

  it("refuses ids that are not a list of strings with a 400 naming the field, changing nothing", async () => {
    const tenant = await createTenant();
    const kept = await publish(tenant, receiverPath("body-bad"), { "Upstash-Delay": "1h" });
    const res = await tenant.api("/v2/messages", { method: "DELETE", json: { messageIds: "all" } });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/^messageIds: /);
    expect((await tenant.api(`/v2/messages/${kept}`)).status).toBe(200);
  });
});

describe("a forwarded header naming the client's address", () => {
  it.each(["X-Forwarded-For", "X-Real-IP", "CF-Connecting-IP", "True-Client-IP", "Forwarded"])(
    "Upstash-Forward-%s is a 400 naming it, and no message is made",
    async (name) => {
      const tenant = await createTenant();
      const url = receiverPath("forged-client");
      const res = await tenant.api(`/v2/publish/${url}`, {
        method: "POST",
        headers: { "Content-Type": "text/plain", [`Upstash-Forward-${name}`]: "203.0.113.7" },
        body: "hi",
      });
      const text = await res.text();
      expect(res.status, text).toBe(400);
      expect(JSON.parse(text).error.toLowerCase()).toContain(`upstash-forward-${name.toLowerCase()}`);
      expect(JSON.parse(text).error).toContain("client's address");
    },
  );
});
