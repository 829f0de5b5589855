/**
 * QStash messages have quotas although no catalog row counts them (docs/qstash.md, "Messages
 * have a quota"): a tenant's live messages under its `maxLiveMessages`, counted at its gate and
 * recounted from its shards; the messages one request may make; how far ahead one may be due.
 * Each refusal is a 4xx naming what refused it, and creates nothing. Against the real D1, gate,
 * shards and Queue.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { MAX_MESSAGES_PER_REQUEST } from "../../src/app/message-quota";
import type { Shard } from "../../src/shard/shard";
import { LIVE_MESSAGES_OF_TENANT_SQL } from "../../src/shard/view-store";
import { api, createTenant, hitsOf, receiverPath, shardOf } from "./helpers";

type Tenant = Awaited<ReturnType<typeof createTenant>>;

const publishTo = (tenant: Tenant, url: string, headers: Record<string, string> = {}) =>
  tenant.api(`/v2/publish/${url}`, { method: "POST", headers: { "Content-Type": "text/plain", ...headers }, body: "hi" });

async function published(tenant: Tenant, url: string, headers: Record<string, string> = {}): Promise<string> {
  const res = await publishTo(tenant, url, headers);
  expect(res.status, await res.clone().text()).toBe(200);
  return ((await res.json()) as { messageId: string }).messageId;
}

/** Every message the tenant's shards hold, cancelled and delivered ones included: what a refusal must not add to. */
async function messagesHeld(tenantId: string): Promise<number> {
  const { results } = await env.DB.prepare("SELECT shard FROM shard_tenants WHERE tenant_id = ?").bind(tenantId).all<{ shard: string }>();
  let n = 0;
  for (const { shard } of results) {
    n += await runInDurableObject(
      shardOf({ shard }),
      (_s: Shard, state) =>
        state.storage.sql.exec("SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = ? AND standalone = 1", tenantId).one().n as number,
    );
  }
  return n;
}

async function errorOf(res: Response): Promise<string> {
  return ((await res.json()) as { error: string }).error;
}

describe("a tenant's live messages", () => {
  it("are a limit of its own, defaulted, shown and changed as its other limits", async () => {
    const tenant = await createTenant();
    const shown = await tenant.api(`/v1/tenants/${tenant.id}`);
    expect(await shown.json()).toMatchObject({ limits: { maxLiveMessages: 10_000 } });
    const changed = await api(`/v1/tenants/${tenant.id}`, { method: "PATCH", json: { limits: { maxLiveMessages: 5 } } });
    expect(changed.status, await changed.clone().text()).toBe(200);
    expect(await changed.json()).toMatchObject({ limits: { maxLiveMessages: 5 } });
    const bad = await api(`/v1/tenants/${tenant.id}`, { method: "PATCH", json: { limits: { maxLiveMessages: 0 } } });
    expect(bad.status).toBe(400);
    expect(JSON.stringify(await bad.json())).toContain("limits.maxLiveMessages");
    const unlimited = await api(`/v1/tenants/${tenant.id}`, { method: "PATCH", json: { limits: { maxLiveMessages: null } } });
    expect(await unlimited.json()).toMatchObject({ limits: { maxLiveMessages: null } });
  });

  it("over the limit, a publish is a 429 naming it, and creates nothing; a cancelled message makes room", async () => {
    const tenant = await createTenant({ maxLiveMessages: 2 });
    const url = receiverPath("quota-held");
    await published(tenant, url, { "Upstash-Delay": "1h" });
    const second = await published(tenant, url, { "Upstash-Delay": "1h" });
    const refused = await publishTo(tenant, url, { "Upstash-Delay": "1h" });
    expect(refused.status).toBe(429);
    expect(await errorOf(refused)).toMatch(/^limits\.maxLiveMessages: this tenant may have at most 2 live messages/);
    expect(await messagesHeld(tenant.id)).toBe(2);
    // A batch that would pass it makes none of its messages, even those that would fit.
    const batch = await tenant.api("/v2/batch", { method: "POST", json: [{ destination: url, headers: { "Upstash-Delay": "1h" } }] });
    expect(batch.status).toBe(429);
    expect(await messagesHeld(tenant.id)).toBe(2);

    expect((await tenant.api(`/v2/messages/${second}`, { method: "DELETE" })).status).toBe(200);
    // The next publish that needs room has the shards count again (at most once a second, so it may wait one).
    await vi.waitFor(async () => expect((await publishTo(tenant, url, { "Upstash-Delay": "1h" })).status).toBe(200), {
      timeout: 10_000,
      interval: 300,
    });
    expect(await messagesHeld(tenant.id)).toBe(3);
    expect((await publishTo(tenant, url, { "Upstash-Delay": "1h" })).status).toBe(429);
  });

  it("a batch over the limit is refused whole, before any message of it is made", async () => {
    const tenant = await createTenant({ maxLiveMessages: 3 });
    const url = receiverPath("quota-batch");
    const items = Array.from({ length: 4 }, () => ({ destination: url, headers: { "Upstash-Delay": "1h" } }));
    const res = await tenant.api("/v2/batch", { method: "POST", json: items });
    expect(res.status).toBe(429);
    expect(await errorOf(res)).toContain("this request makes 4");
    expect(await messagesHeld(tenant.id)).toBe(0);
    expect((await tenant.api("/v2/batch", { method: "POST", json: items.slice(0, 3) })).status).toBe(200);
    expect(await messagesHeld(tenant.id)).toBe(3);
  });

  it("are given back once delivered: the tenant publishes again", async () => {
    const tenant = await createTenant({ maxLiveMessages: 2 });
    const url = receiverPath("quota-delivered");
    await published(tenant, url);
    await published(tenant, url);
    await vi.waitFor(async () => expect(await hitsOf(url)).toHaveLength(2), { timeout: 15_000, interval: 100 });
    // Delivered, each message's job stays in its shard (until retention) but is no longer live.
    await vi.waitFor(async () => expect((await publishTo(tenant, url, { "Upstash-Delay": "1h" })).status).toBe(200), {
      timeout: 15_000,
      interval: 300,
    });
    await vi.waitFor(async () => expect((await publishTo(tenant, url, { "Upstash-Delay": "1h" })).status).toBe(200), {
      timeout: 15_000,
      interval: 300,
    });
    // Two live again: the limit holds.
    expect((await publishTo(tenant, url, { "Upstash-Delay": "1h" })).status).toBe(429);
    expect(await messagesHeld(tenant.id)).toBe(4);
  });

  it("a count the gate lost (a fresh gate's) is taken from the shards, not started at zero", async () => {
    const tenant = await createTenant({ maxLiveMessages: 2 });
    const url = receiverPath("quota-recount");
    await published(tenant, url, { "Upstash-Delay": "1h" });
    await published(tenant, url, { "Upstash-Delay": "1h" });
    // The gate's count dropped, as if its storage were new.
    const gate = env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenant.id));
    await runInDurableObject(gate, (_g, state) => {
      state.storage.sql.exec("DELETE FROM message_count");
    });
    const res = await publishTo(tenant, url, { "Upstash-Delay": "1h" });
    expect(res.status).toBe(429);
    expect(await messagesHeld(tenant.id)).toBe(2);
  });

  it("a shard counts a tenant's live messages from its index, a seek per message, never a walk of its jobs or runs", async () => {
    const tenant = await createTenant();
    await published(tenant, receiverPath("quota-plan"), { "Upstash-Delay": "1h" });
    const { results } = await env.DB.prepare("SELECT shard FROM shard_tenants WHERE tenant_id = ?")
      .bind(tenant.id)
      .all<{ shard: string }>();
    const plan = await runInDurableObject(shardOf({ shard: results[0]!.shard }), (_s: Shard, state) =>
      state.storage.sql
        .exec(`EXPLAIN QUERY PLAN ${LIVE_MESSAGES_OF_TENANT_SQL}`, tenant.id)
        .toArray()
        .map((r) => r.detail as string),
    );
    expect(plan[0]).toMatch(/^SEARCH j USING (COVERING )?INDEX jobs_standalone \(tenant_id=\?\)$/);
    expect(plan.slice(1).join(" | ")).toMatch(/SEARCH r USING (PRIMARY KEY|INDEX \S+) \(id>\? AND id<\?\)/);
    expect(plan.join(" | ")).not.toMatch(/SCAN/);
  });
});

describe("a publish's bounds", () => {
  it("one request makes at most MAX_MESSAGES_PER_REQUEST messages, items × URL-group endpoints: a 400 naming the cap, nothing made", async () => {
    const tenant = await createTenant();
    const endpoints = [{ url: receiverPath("quota-cap-1") }, { url: receiverPath("quota-cap-2") }];
    const group = await tenant.api("/v2/topics/quota-cap/endpoints", { method: "POST", json: { endpoints } });
    expect(group.status, await group.clone().text()).toBeLessThan(300);
    const items = Array.from({ length: MAX_MESSAGES_PER_REQUEST / 2 + 1 }, () => ({
      destination: "quota-cap",
      headers: { "Upstash-Delay": "1h" },
    }));
    const res = await tenant.api("/v2/batch", { method: "POST", json: items });
    expect(res.status).toBe(400);
    expect(await errorOf(res)).toBe(
      `body: this request would make ${MAX_MESSAGES_PER_REQUEST + 2} messages (one per item, and per endpoint of a URL group); at most ${MAX_MESSAGES_PER_REQUEST} a request`,
    );
    expect(await messagesHeld(tenant.id)).toBe(0);
  });

  it.each([
    ["Upstash-Delay", "366d", /^Upstash-Delay: "366d" is too long: a message may be delayed at most 365d$/],
    ["Upstash-Not-Before", String(Math.floor(Date.now() / 1000) + 2 * 365 * 86_400), /^Upstash-Not-Before: \d+ is too far ahead: .*365d/],
    ["Upstash-Not-Before", String(Date.parse("2099-01-01T00:00:00Z") / 1000), /^Upstash-Not-Before: \d+ is too far ahead/],
  ])("%s %s, past a year ahead, is a 400 naming the header and the bound; nothing made", async (header, value, message) => {
    const tenant = await createTenant();
    const res = await publishTo(tenant, receiverPath("quota-far"), { [header]: value });
    expect(res.status).toBe(400);
    expect(await errorOf(res)).toMatch(message);
    expect(await messagesHeld(tenant.id)).toBe(0);
  });
});
