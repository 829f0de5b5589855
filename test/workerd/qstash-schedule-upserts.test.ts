/**
 * A QStash schedule's upsert replaces its job: concurrent upserts of one id, or an upsert that
 * dies between its steps, must not leave a second cron job firing for ever. Real D1 and shards.
 */
import { env } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { armFault, disarmFaults } from "../../src/faults";
import { sweep } from "../../src/reconcile/sweep";
import { createTenant, receiverPath } from "./helpers";

type Tenant = Awaited<ReturnType<typeof createTenant>>;

afterEach(() => disarmFaults());

const upsert = (tenant: Tenant, scheduleId: string, body = "x") =>
  tenant.api(`/v2/schedules/${receiverPath("schedule-upsert")}`, {
    method: "POST",
    headers: { "Upstash-Cron": "0 0 1 1 *", "Upstash-Schedule-Id": scheduleId },
    body,
  });

/** The tenant's live jobs of the schedule, and the job its id names. */
async function jobsOf(tenant: Tenant, scheduleId: string) {
  const live = await env.DB.prepare("SELECT id FROM jobs WHERE tenant_id = ? AND name = ? AND deleted_at IS NULL")
    .bind(tenant.id, `qstash schedule ${scheduleId}`)
    .all<{ id: string }>();
  const row = await env.DB.prepare("SELECT job_id FROM qstash_schedules WHERE tenant_id = ? AND schedule_id = ?")
    .bind(tenant.id, scheduleId)
    .first<{ job_id: string }>();
  return { live: live.results.map((r) => r.id), named: row?.job_id ?? null };
}

/** As if the jobs were made long enough ago that no upsert can still be under way with them. */
const age = (tenant: Tenant) =>
  env.DB.prepare("UPDATE jobs SET created_at = created_at - 3600000 WHERE tenant_id = ?").bind(tenant.id).run();

describe("a QStash schedule's upsert", () => {
  it("concurrent upserts of one schedule id leave exactly one live job, the one its id names", async () => {
    const tenant = await createTenant();
    const answers = await Promise.all(Array.from({ length: 4 }, (_, i) => upsert(tenant, "concurrent", `v${i}`)));
    for (const res of answers) expect(res.status, await res.clone().text()).toBeLessThan(300);
    const { live, named } = await jobsOf(tenant, "concurrent");
    expect(live).toHaveLength(1);
    expect(live[0]).toBe(named);
  });

  it("an upsert that died after making its job leaves no orphan once the sweep has run", async () => {
    const tenant = await createTenant();
    expect((await upsert(tenant, "crashed-new")).status).toBeLessThan(300);
    armFault("qstash.scheduleStep", 1, "created");
    expect((await upsert(tenant, "crashed-new", "v2")).status).toBe(500);
    const before = await jobsOf(tenant, "crashed-new");
    expect(before.live).toHaveLength(2);
    await age(tenant);
    await sweep(env);
    const after = await jobsOf(tenant, "crashed-new");
    expect(after.live).toEqual([before.named]);
  });

  it("an upsert that died after moving its id leaves no orphan of the version it replaced once the sweep has run", async () => {
    const tenant = await createTenant();
    expect((await upsert(tenant, "crashed-old")).status).toBeLessThan(300);
    armFault("qstash.scheduleStep", 1, "named");
    expect((await upsert(tenant, "crashed-old", "v2")).status).toBe(500);
    const before = await jobsOf(tenant, "crashed-old");
    expect(before.live).toHaveLength(2);
    await age(tenant);
    await sweep(env);
    const after = await jobsOf(tenant, "crashed-old");
    expect(after.live).toEqual([before.named]);
  });

  it("a job another way named like a schedule's, with no schedule behind it, is not touched", async () => {
    const tenant = await createTenant();
    const res = await tenant.api("/v1/jobs", {
      method: "POST",
      json: { name: "qstash schedule mine", schedule: { cron: "0 0 1 1 *" }, target: { url: receiverPath("named-like") }, breaker: false },
    });
    expect(res.status, await res.clone().text()).toBe(201);
    await age(tenant);
    await sweep(env);
    expect((await jobsOf(tenant, "mine")).live).toHaveLength(1);
  });
});
