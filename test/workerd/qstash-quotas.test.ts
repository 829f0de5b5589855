/**
 * QStash messages have quotas although no catalog row counts them (docs/qstash.md, "Messages
 * have a quota"): a tenant's live messages under its `maxLiveMessages`, counted at its gate and
 * recounted from its shards by the gate's alarm, never while a publish waits; the messages one
 * request may make; how far ahead one may be due.
 * Each refusal is a 4xx naming what refused it, and creates nothing. Against the real D1, gate,
 * shards and Queue.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { MAX_MESSAGES_PER_REQUEST } from "../../src/app/message-quota";
import { armFault, disarmFault } from "../../src/faults";
import { type MessageCount, recountEvery } from "../../src/gate/message-quota";
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

const gateOf = (tenantId: string) => env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenantId));

/** The gate's count as it stores it. */
async function countAt(tenantId: string): Promise<MessageCount> {
  return runInDurableObject(gateOf(tenantId), (_g, state) => {
    const row = state.storage.sql.exec("SELECT state FROM message_count").toArray()[0];
    return JSON.parse(row!.state as string) as MessageCount;
  });
}

/** Runs the gate's alarm until no recount is under way (the runtime may run it too, meanwhile): no waiting on the clock. */
async function recountToEnd(tenantId: string): Promise<MessageCount> {
  await vi.waitFor(
    async () => {
      await runDurableObjectAlarm(gateOf(tenantId));
      expect((await countAt(tenantId)).recount).toBeNull();
    },
    { timeout: 60_000, interval: 20 },
  );
  return countAt(tenantId);
}

/** The gate's last recount made `ms` older, as if that time had passed. */
async function ageCount(tenantId: string, ms: number): Promise<void> {
  await runInDurableObject(gateOf(tenantId), (_g, state) => {
    const count = JSON.parse(state.storage.sql.exec("SELECT state FROM message_count").one().state as string) as MessageCount;
    state.storage.sql.exec("UPDATE message_count SET state = ?", JSON.stringify({ ...count, countedAt: count.countedAt! - ms }));
  });
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

  it("a count the gate lost (a fresh gate's) is taken again from the shards in the background, the publish that found it granted", async () => {
    const tenant = await createTenant({ maxLiveMessages: 2 });
    const url = receiverPath("quota-recount");
    await published(tenant, url, { "Upstash-Delay": "1h" });
    await published(tenant, url, { "Upstash-Delay": "1h" });
    await recountToEnd(tenant.id);
    // The gate's count dropped, as if its storage were new: it starts at zero, and recounts.
    await runInDurableObject(gateOf(tenant.id), (_g, state) => {
      state.storage.sql.exec("DELETE FROM message_count");
    });
    await published(tenant, url, { "Upstash-Delay": "1h" });
    // The recount finds the two made before it began, and adds the one reserved since.
    expect(await recountToEnd(tenant.id)).toMatchObject({ live: 3, recount: null });
    const res = await publishTo(tenant, url, { "Upstash-Delay": "1h" });
    expect(res.status).toBe(429);
    expect(await errorOf(res)).toContain("3 are");
    expect(await messagesHeld(tenant.id)).toBe(3);
  });

  it("a tenant on 250 shards: no publish waits on them; the gate's alarm asks them, over several alarms, and room comes back", async () => {
    const tenant = await createTenant({ maxLiveMessages: 3 });
    const url = receiverPath("quota-wide");
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
       INSERT OR IGNORE INTO shard_tenants (shard, tenant_id) SELECT 'shard-' || i, ?2 FROM n`,
    )
      // Past RECOUNT_SHARDS_PER_STEP (240), so that a recount takes more than one alarm.
      .bind(250, tenant.id)
      .run();
    // Every shard refuses to count for this tenant: a publish that asked any before answering would fail.
    armFault("shard.countLiveMessages", Number.POSITIVE_INFINITY, tenant.id);
    const ids: string[] = [];
    try {
      for (let i = 0; i < 3; i++) ids.push(await published(tenant, url, { "Upstash-Delay": "1h" }));
      const refused = await publishTo(tenant, url, { "Upstash-Delay": "1h" });
      expect(refused.status).toBe(429);
      // A recount is under way (the first publish began it): come back in a second.
      expect(refused.headers.get("Retry-After")).toBe("1");
    } finally {
      disarmFault("shard.countLiveMessages", tenant.id);
    }
    for (const id of ids.slice(0, 2)) expect((await tenant.api(`/v2/messages/${id}`, { method: "DELETE" })).status).toBe(200);
    // The 250, and those of the three messages' shards that are not among them.
    const registered = (await env.DB.prepare("SELECT COUNT(*) AS n FROM shard_tenants WHERE tenant_id = ?")
      .bind(tenant.id)
      .first<{ n: number }>())!.n;

    // The first recount began before any message was made: its shards count none, the three reserved since are kept.
    // Every shard was asked, though one alarm asks at most 240: the alarms went on from where each stopped.
    const first = await recountToEnd(tenant.id);
    expect(first).toMatchObject({ live: 3, shards: registered, recount: null, sinceRecount: 0 });
    expect((await publishTo(tenant, url, { "Upstash-Delay": "1h" })).status).toBe(429);

    // Later (a refusal recounts at most once per 50 ms × the shards, made past): the refusal begins a recount,
    // the next publish after it has the room that the cancelled messages gave back.
    await ageCount(tenant.id, recountEvery(registered));
    const again = await publishTo(tenant, url, { "Upstash-Delay": "1h" });
    expect(again.status).toBe(429);
    expect(await recountToEnd(tenant.id)).toMatchObject({ live: 1, shards: registered });
    await published(tenant, url, { "Upstash-Delay": "1h" });
    await published(tenant, url, { "Upstash-Delay": "1h" });
    expect((await publishTo(tenant, url, { "Upstash-Delay": "1h" })).status).toBe(429);
    expect(await messagesHeld(tenant.id)).toBe(5);
    // Each recount starts a few hundred shard objects: far more work than a test's usual 30 s allow for on a loaded machine.
  }, 120_000);

  it("a shard counts a tenant's live messages from its index, a seek per message, never a walk of its jobs or runs", async () => {
    const tenant = await createTenant();
    await published(tenant, receiverPath("quota-plan"), { "Upstash-Delay": "1h" });
    const { results } = await env.DB.prepare("SELECT shard FROM shard_tenants WHERE tenant_id = ?")
      .bind(tenant.id)
      .all<{ shard: string }>();
    const plan = await runInDurableObject(shardOf({ shard: results[0]!.shard }), (_s: Shard, state) =>
      state.storage.sql
        .exec(`EXPLAIN QUERY PLAN ${LIVE_MESSAGES_OF_TENANT_SQL}`, tenant.id, "job_~")
        .toArray()
        .map((r) => r.detail as string),
    );
    expect(plan[0]).toMatch(/^SEARCH j USING (COVERING )?INDEX jobs_standalone \(tenant_id=\? AND id<\?\)$/);
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
