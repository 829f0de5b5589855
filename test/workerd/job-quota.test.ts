import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { insertJobsStatement } from "../../src/catalog/insert-jobs";
import type { CatalogJob } from "../../src/catalog/jobs";
import { COUNT_LIVE_JOBS_SQL, recountLiveJobs } from "../../src/catalog/live-jobs";
import type { TenantGate } from "../../src/gate/tenant-gate";
import { newJobId } from "../../src/model/ids";
import type { Job } from "../../src/model/job";
import { api, createJob, createTenant, FAR_CRON, receiverPath } from "./helpers";

/**
 * `maxJobs` counts a tenant's live jobs (src/model/live-jobs.ts): not deleted, with an instant of
 * their schedule to come. Its gate keeps the count (src/gate/job-count.ts) and leases room to
 * the isolates, so a creation counts nothing in D1 however many jobs the tenant has. Through
 * the real API, D1 and the tenant's gate.
 */

type Tenant = Awaited<ReturnType<typeof createTenant>>;
type RouteCost = { calls: number; rowsRead: number };

const past = (ms = 60_000) => ({ at: new Date(Date.now() - ms).toISOString() });
const oneOffDone = () => ({ schedule: past(), target: { url: receiverPath("quota-done") } });
const recurring = () => ({ schedule: FAR_CRON, target: { url: receiverPath("quota-live") } });

async function post(t: Tenant, body: Record<string, unknown>): Promise<Response> {
  return t.api("/v1/jobs", { method: "POST", json: { breaker: false, ...body } });
}

async function expectRefused(res: Response): Promise<void> {
  const text = await res.text();
  expect(res.status, text).toBe(403);
  expect((JSON.parse(text) as { error: { code: string } }).error.code).toBe("quota_exceeded");
}

async function setLimits(t: Tenant, limits: Record<string, number | null>): Promise<void> {
  const res = await api(`/v1/tenants/${t.id}`, { method: "PATCH", json: { limits } });
  expect(res.status, await res.clone().text()).toBe(200);
}

async function costOf(route: string): Promise<RouteCost> {
  const res = await api("/v1/metrics?window=1h");
  const ops = ((await res.json()) as { cost: { workerOperations: Record<string, RouteCost> } }).cost.workerOperations;
  return ops[route] ?? { calls: 0, rowsRead: 0 };
}

/** D1 rows read per call of POST /v1/jobs while `calls` creates of `t` run, its key already looked up. */
async function rowsReadPerCreate(t: Tenant, calls: number, run: () => Promise<void>): Promise<number> {
  expect((await t.api("/v1/me")).status).toBe(200);
  const before = await costOf("POST /v1/jobs");
  await run();
  return vi.waitFor(
    async () => {
      const after = await costOf("POST /v1/jobs");
      expect(after.calls - before.calls).toBe(calls);
      return (after.rowsRead - before.rowsRead) / calls;
    },
    { timeout: 15_000, interval: 200 },
  );
}

const gateOf = (t: Tenant) => env.TENANT_GATE.get(env.TENANT_GATE.idFromName(t.id));

describe("maxJobs without a count per creation", () => {
  it("a creation reads as many D1 rows with 300 jobs as with none: nothing of the tenant's jobs is counted", async () => {
    const t = await createTenant({ requestsPerSecond: null });
    const first = await rowsReadPerCreate(t, 3, async () => {
      for (let i = 0; i < 3; i++) expect((await post(t, recurring())).status).toBe(201);
    });
    for (let i = 0; i < 3; i++) {
      const res = await t.api("/v1/jobs/batch", { method: "POST", json: { jobs: Array.from({ length: 100 }, recurring) } });
      expect(res.status, await res.clone().text()).toBe(200);
    }
    const later = await rowsReadPerCreate(t, 3, async () => {
      for (let i = 0; i < 3; i++) expect((await post(t, recurring())).status).toBe(201);
    });
    // Counting 300 jobs would read some 600 rows more (the index, and each row for its spec). A
    // row or two differ with whether the job's shard was already registered for the tenant.
    expect(later).toBeLessThanOrEqual(first + 2);
    expect(later).toBeLessThan(10);
  });

  it("the gate counts what the tenant created, and a deletion through the API gives its place back at once", async () => {
    const t = await createTenant({ maxJobs: 3 });
    const jobs: Job[] = [];
    for (let i = 0; i < 3; i++) jobs.push(await createJob(recurring(), t.api));
    await expectRefused(await post(t, recurring()));
    expect((await t.api(`/v1/jobs/${jobs[0]!.id}`, { method: "DELETE" })).status).toBe(200);
    expect((await post(t, recurring())).status).toBe(201);
    await expectRefused(await post(t, recurring()));
    // Near the quota a lease holds what its request needs and no more: the count is the truth.
    const count = await runInDurableObject(gateOf(t), (gate: TenantGate) => gate.liveJobs());
    expect(count!.live).toBe(3);
  });
  it("a recount made elsewhere voids the room this isolate holds: its jobs take room again, and the count stays at least the truth", async () => {
    const t = await createTenant({ maxJobs: 1_000, requestsPerSecond: null });
    // Leases of 1, 2 and 4: after four creations this isolate holds room for 3 more.
    for (let i = 0; i < 4; i++) expect((await post(t, recurring())).status).toBe(201);
    // Elsewhere, the gate counts again (as for a change of the tenant made through another isolate).
    const before = await env.DB.prepare("SELECT version, jobs_epoch FROM tenants WHERE id = ?")
      .bind(t.id)
      .first<{ version: number; jobs_epoch: number }>();
    await runInDurableObject(gateOf(t), (gate: TenantGate) => gate.quotaChanged(t.id, 1_000, before!.version));
    const elsewhere = await runInDurableObject(gateOf(t), (gate: TenantGate) => gate.takeJobRoom(t.id, 1_000, before!.version, 1, 1));
    expect(elsewhere).toMatchObject({ granted: 1, epoch: before!.jobs_epoch + 1 });
    for (let i = 0; i < 3; i++) expect((await post(t, recurring())).status).toBe(201);
    const live = await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = ? AND deleted_at IS NULL")
      .bind(t.id)
      .first<{ n: number }>();
    expect(live!.n).toBe(7);
    const count = await runInDurableObject(gateOf(t), (gate: TenantGate) => gate.liveJobs());
    // The 4 counted, the room granted elsewhere, and the room taken again for the 3: none of them uncounted.
    expect(count!.live).toBeGreaterThanOrEqual(4 + 1 + 3);
  });
  it("a quota lowered holds for every creation after the change is answered, on room leased before included", async () => {
    const t = await createTenant({ maxJobs: 1_000, requestsPerSecond: null });
    // Leases of 1, 2 and 4: after four creations this isolate holds room for 3 more.
    for (let i = 0; i < 4; i++) expect((await post(t, recurring())).status).toBe(201);
    // Another isolate holds room too, leased under the quota before.
    const { version } = (await env.DB.prepare("SELECT version FROM tenants WHERE id = ?").bind(t.id).first<{ version: number }>())!;
    const held = await runInDurableObject(gateOf(t), (gate: TenantGate) => gate.takeJobRoom(t.id, 1_000, version, 1, 8));
    expect(held).toMatchObject({ granted: 8 });
    await setLimits(t, { maxJobs: 4 });
    // What the other isolate would write on its room now writes nothing (it takes room again, and finds none).
    const now = Date.now();
    const job = {
      id: newJobId(now),
      tenantId: t.id,
      name: null,
      shard: "shard-1",
      version: 1,
      spec: { schedule: FAR_CRON },
      paused: false,
      createdAt: now,
    };
    const write = insertJobsStatement(env.DB, [job as unknown as CatalogJob], (held as { epoch: number }).epoch);
    expect((await write.run()).meta.changes).toBe(0);
    await expectRefused(await post(t, recurring()));
    await setLimits(t, { maxJobs: 5 });
    expect((await post(t, recurring())).status).toBe(201);
    await expectRefused(await post(t, recurring()));
  });
});

describe("finished one-off jobs are not live", () => {
  it("a tenant at its maxJobs of one-offs that came due is not refused: they leave the count at its next recount", async () => {
    const t = await createTenant({ maxJobs: 2 });
    for (let i = 0; i < 2; i++) expect((await post(t, oneOffDone())).status).toBe(201);
    // Counted when made; the gate's next recount (at most a second after its last, when a
    // creation finds no room) finds them finished. A client retries a refusal after a while.
    for (let i = 0; i < 6; i++) {
      await vi.waitFor(async () => expect((await post(t, oneOffDone())).status).toBe(201), { timeout: 10_000, interval: 250 });
    }
    const live = await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = ? AND deleted_at IS NULL")
      .bind(t.id)
      .first<{ n: number }>();
    expect(live!.n).toBe(8);
    // Jobs with an instant to come still count: two of them fill it.
    for (let i = 0; i < 2; i++) {
      await vi.waitFor(async () => expect((await post(t, recurring())).status).toBe(201), { timeout: 10_000, interval: 250 });
    }
    await expectRefused(await post(t, recurring()));
  });

  it("one-offs and ended schedules made while there was no quota are not counted when one is set", async () => {
    const t = await createTenant({ maxJobs: null });
    for (let i = 0; i < 5; i++) expect((await post(t, oneOffDone())).status).toBe(201);
    const ended = {
      schedule: {
        cron: "* * * * *",
        startAt: new Date(Date.now() - 7_200_000).toISOString(),
        endAt: new Date(Date.now() - 3_600_000).toISOString(),
      },
    };
    expect((await post(t, { ...ended, target: { url: receiverPath("quota-ended") } })).status).toBe(201);
    expect((await post(t, recurring())).status).toBe(201);
    await setLimits(t, { maxJobs: 3 });
    expect((await post(t, recurring())).status).toBe(201);
    expect((await post(t, recurring())).status).toBe(201);
    await expectRefused(await post(t, recurring()));
  });

  it("a quota taken away and set again counts the jobs made meanwhile", async () => {
    const t = await createTenant({ maxJobs: 5 });
    for (let i = 0; i < 2; i++) expect((await post(t, recurring())).status).toBe(201);
    await setLimits(t, { maxJobs: null });
    for (let i = 0; i < 5; i++) expect((await post(t, recurring())).status).toBe(201);
    await setLimits(t, { maxJobs: 8 });
    expect((await post(t, recurring())).status).toBe(201);
    await expectRefused(await post(t, recurring()));
  });

  it("a change that gives a finished one-off an instant to come needs a place: 403 without one, nothing changed", async () => {
    const t = await createTenant({ maxJobs: null });
    const done = await createJob(oneOffDone(), t.api);
    const live = await createJob(recurring(), t.api);
    await setLimits(t, { maxJobs: 1 });
    const ahead = { schedule: { at: new Date(Date.now() + 3_600_000).toISOString() } };
    await expectRefused(await t.api(`/v1/jobs/${done.id}`, { method: "PATCH", json: ahead }));
    expect(((await (await t.api(`/v1/jobs/${done.id}`)).json()) as Job).version).toBe(done.version);
    // A change that leaves it finished needs none.
    expect((await t.api(`/v1/jobs/${done.id}`, { method: "PATCH", json: { name: "renamed" } })).status).toBe(200);

    expect((await t.api(`/v1/jobs/${live.id}`, { method: "DELETE" })).status).toBe(200);
    const revived = await t.api(`/v1/jobs/${done.id}`, { method: "PATCH", json: ahead });
    expect(revived.status, await revived.clone().text()).toBe(200);
    await expectRefused(await post(t, recurring()));
  });
});

describe("the recount", () => {
  const NOW = Date.UTC(2026, 5, 1, 12);
  const iso = (ms: number) => new Date(ms).toISOString();

  it("counts the jobs live at its cutoff, seeking the tenant's by jobs_by_tenant, and bumps the lease epoch with it", async () => {
    const t = await createTenant();
    const insert = env.DB.prepare(
      "INSERT INTO jobs (id, tenant_id, shard, version, spec, paused, created_at, updated_at, deleted_at) VALUES (?, ?, 's', 1, ?, 0, 0, 0, ?)",
    );
    const spec = (schedule: Record<string, string>) => JSON.stringify({ schedule });
    const rows: Array<[Record<string, string>, number | null]> = [
      [{ cron: "* * * * *" }, null], // live
      [{ at: iso(NOW + 1) }, null], // live: its instant is to come
      [{ at: iso(NOW) }, null], // finished: its instant came
      [{ every: "1m", endAt: iso(NOW - 1) }, null], // finished: its endAt passed
      [{ every: "1m", endAt: iso(NOW + 60_000) }, null], // live
      [{ cron: "* * * * *" }, NOW - 1], // deleted before the cutoff
      [{ cron: "* * * * *" }, NOW + 1], // deleted after it: live at it
    ];
    await env.DB.batch(rows.map(([schedule, deletedAt]) => insert.bind(`job_${crypto.randomUUID()}`, t.id, spec(schedule), deletedAt)));
    const before = await env.DB.prepare("SELECT jobs_epoch FROM tenants WHERE id = ?").bind(t.id).first<{ jobs_epoch: number }>();
    expect(await recountLiveJobs(env.DB, t.id, NOW)).toEqual({ live: 4, epoch: before!.jobs_epoch + 1 });
    const plan = await env.DB.prepare(`EXPLAIN QUERY PLAN ${COUNT_LIVE_JOBS_SQL}`).bind(t.id, NOW, iso(NOW)).all();
    expect(JSON.stringify(plan.results)).toContain("jobs_by_tenant");
    expect(await recountLiveJobs(env.DB, "ten_nosuchtenantnosuchte", NOW)).toBeNull();
  });
});
