/**
 * QStash deduplication (Upstash-Deduplication-Id, Upstash-Content-Based-Deduplication): an id is
 * reserved before its message is made, so that concurrent publishes, and a retry after a failure
 * that had already handed the message over, make one message; reservations and flow-control
 * windows do not outlive their use. Against the real D1, shards and tenant gates.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { armFault, disarmFaults } from "../../src/faults";
import type { TenantGate } from "../../src/gate/tenant-gate";
import { sweep } from "../../src/reconcile/sweep";
import { gateStub } from "../../src/stubs";
import { createTenant, hitsOf, receiverPath } from "./helpers";

type Tenant = Awaited<ReturnType<typeof createTenant>>;

afterEach(() => disarmFaults());

const publish = (tenant: Tenant, url: string, headers: Record<string, string>, body = "hi") =>
  tenant.api(`/v2/publish/${url}`, { method: "POST", headers: { "Content-Type": "text/plain", ...headers }, body });

const idOf = async (res: Response) => {
  expect(res.status, await res.clone().text()).toBe(200);
  return ((await res.json()) as { messageId: string }).messageId;
};

/** Live messages of `tenant` to `url`, cancelled: how many there were. */
async function cancelAll(tenant: Tenant, url: string): Promise<number> {
  const res = await tenant.api(`/v2/messages?url=${encodeURIComponent(url)}`, { method: "DELETE" });
  expect(res.status, await res.clone().text()).toBe(200);
  return ((await res.json()) as { cancelled: number }).cancelled;
}

const dedupRows = async (tenantId: string) =>
  (await env.DB.prepare("SELECT COUNT(*) AS n FROM qstash_dedup WHERE tenant_id = ?").bind(tenantId).first<{ n: number }>())!.n;

describe("QStash deduplication", () => {
  it("concurrent publishes with one Upstash-Deduplication-Id make one message", async () => {
    const tenant = await createTenant();
    const url = receiverPath("dedup-concurrent");
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) => publish(tenant, url, { "Upstash-Delay": "1h", "Upstash-Deduplication-Id": "once" }, `b${i}`)),
    );
    const ids = await Promise.all(answers.map(idOf));
    expect(new Set(ids).size).toBe(1);
    expect(await cancelAll(tenant, url)).toBe(1);
  });

  it("concurrent publishes of one content with content-based deduplication make one message, delivered once", async () => {
    const tenant = await createTenant();
    const url = receiverPath("dedup-content");
    const answers = await Promise.all(
      Array.from({ length: 6 }, () => publish(tenant, url, { "Upstash-Content-Based-Deduplication": "true" })),
    );
    const ids = await Promise.all(answers.map(idOf));
    expect(new Set(ids).size).toBe(1);
    await vi.waitFor(
      async () => {
        const res = await tenant.api(`/v2/events?messageIds=${ids[0]}`);
        const { events } = (await res.json()) as { events: Array<{ state: string }> };
        expect(events.map((e) => e.state)).toContain("DELIVERED");
      },
      { timeout: 15_000, interval: 100 },
    );
    expect(await hitsOf(url)).toHaveLength(1);
  });

  it("a retry after a publish that handed its message over and then failed makes no second message", async () => {
    const tenant = await createTenant();
    const url = receiverPath("dedup-retry");
    armFault("qstash.afterHandOver");
    const failed = await publish(tenant, url, { "Upstash-Delay": "1h", "Upstash-Deduplication-Id": "retried" });
    expect(failed.status).toBeGreaterThanOrEqual(500);
    const id = await idOf(await publish(tenant, url, { "Upstash-Delay": "1h", "Upstash-Deduplication-Id": "retried" }));
    // The one message is the retry's answer.
    const shown = await tenant.api(`/v2/messages/${id}`);
    expect(shown.status, await shown.clone().text()).toBe(200);
    expect(await cancelAll(tenant, url)).toBe(1);
  });

  it("a reservation past the ten-minute window is removed, and its id makes a new message", async () => {
    const tenant = await createTenant();
    const url = receiverPath("dedup-expiry");
    for (let i = 0; i < 5; i++) await idOf(await publish(tenant, url, { "Upstash-Delay": "1h", "Upstash-Deduplication-Id": `old-${i}` }));
    expect(await dedupRows(tenant.id)).toBe(5);
    await env.DB.prepare("UPDATE qstash_dedup SET expires_at = expires_at - 11 * 60000 WHERE tenant_id = ?").bind(tenant.id).run();
    const again = await idOf(await publish(tenant, url, { "Upstash-Delay": "1h", "Upstash-Deduplication-Id": "old-0" }));
    expect(again).toBeDefined();
    expect(await dedupRows(tenant.id)).toBe(1);
    expect(await cancelAll(tenant, url)).toBe(6);
  });
});

describe("the sweep and deduplication ids", () => {
  it("removes the ids past their window that no publish came to remove", async () => {
    const tenant = await createTenant();
    const url = receiverPath("dedup-sweep");
    for (let i = 0; i < 3; i++) await idOf(await publish(tenant, url, { "Upstash-Delay": "1h", "Upstash-Deduplication-Id": `gone-${i}` }));
    await env.DB.prepare("UPDATE qstash_dedup SET expires_at = expires_at - 11 * 60000 WHERE tenant_id = ?").bind(tenant.id).run();
    const report = await sweep(env);
    expect(report.dedupExpired).toBeGreaterThanOrEqual(3);
    expect(await dedupRows(tenant.id)).toBe(0);
    await cancelAll(tenant, url);
  });
});

describe("flow-control windows", () => {
  const windows = (gate: DurableObjectStub<TenantGate>) =>
    runInDurableObject(gate, (_g: TenantGate, state) =>
      state.storage.sql
        .exec("SELECT grp FROM group_windows")
        .toArray()
        .map((r) => r.grp),
    );

  it("a rate group's window row goes once its window is over: client-chosen keys do not pile up", async () => {
    const gate = gateStub(env, `gate-windows-${crypto.randomUUID()}`) as unknown as DurableObjectStub<TenantGate>;
    const ask = (key: string) => ({ permit: `p-${key}`, tenant: false, group: { key, rate: 5, periodMs: 1_000 } });
    const keys = Array.from({ length: 20 }, (_, i) => `user-${i}`);
    await gate.admit("shard-windows", keys.map(ask), null, 60_000);
    expect((await windows(gate)).sort()).toEqual([...keys].sort());
    const over = Date.now() + 1_000;
    await vi.waitFor(() => expect(Date.now()).toBeGreaterThan(over), { timeout: 5_000, interval: 50 });
    await gate.admit("shard-windows", [ask("user-new")], null, 60_000);
    expect(await windows(gate)).toEqual(["user-new"]);
  });
});
