import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { armFault, disarmFault, disarmFaults } from "../../src/faults";
import type { Job } from "../../src/model/job";
import type { Shard } from "../../src/shard/shard";
import { verifyRequest } from "../../src/verify";
import type { Hit } from "../support/hit";
import { api, createJob, createTenant, FAR_CRON, fireNow, hitsOf, listRuns, receiverPath, shardOf } from "./helpers";

afterEach(() => disarmFaults());

/** A job that fires when the test says, one attempt per run, its target answering `statuses` in turn. */
function jobWith(statuses: string, notify: Record<string, unknown>, extra: Record<string, unknown> = {}, as = api): Promise<Job> {
  return createJob(
    {
      schedule: FAR_CRON,
      target: { url: receiverPath("notify-target", `status=${statuses}`) },
      retry: { maxAttempts: 1 },
      notify,
      ...extra,
    },
    as,
  );
}

async function runOnce(job: Job): Promise<{ id: string; state: string }> {
  const due = await fireNow(job);
  return vi.waitFor(
    async () => {
      const run = (await listRuns(job.id)).find((r) => Date.parse(r.scheduledAt) === due);
      if (!run || !["succeeded", "dead", "failed"].includes(run.state)) throw new Error(`run at ${due}: ${run?.state ?? "none yet"}`);
      return run;
    },
    { timeout: 15_000, interval: 50 },
  );
}

/** The notifications `url` received, waiting until there are `count`. */
async function received(url: string, count: number, timeout = 15_000): Promise<Hit[]> {
  return vi.waitFor(
    async () => {
      const hits = await hitsOf(url);
      if (hits.length < count) throw new Error(`${hits.length} of ${count} notifications so far`);
      return hits;
    },
    { timeout, interval: 100 },
  );
}

const outbox = (job: Job) =>
  runInDurableObject(shardOf(job), (_s: Shard, state) =>
    state.storage.sql.exec("SELECT id, sends FROM notifications WHERE job_id = ?", job.id).toArray(),
  );

describe("notify", () => {
  it("a dead run is notified, signed with the tenant's secret, retried until the receiver takes it, then leaves the outbox", async () => {
    const tenant = await createTenant();
    const url = receiverPath("notify", "status=500,200");
    const job = await jobWith("500", { url, on: ["dead"] }, {}, tenant.api);
    const run = await runOnce(job);
    expect(run.state).toBe("dead");

    // The first delivery gets a 500; the Queue's retry, a few seconds later, a 200.
    const hits = await received(url, 2, 30_000);
    expect(hits[0]!.headers["idempotency-key"]).toBe(`${run.id}:dead`);
    expect(hits[1]!.headers["idempotency-key"]).toBe(hits[0]!.headers["idempotency-key"]);
    expect(hits[1]!.headers["x-edgecron-event"]).toBe("dead");
    const body = JSON.parse(hits[1]!.body);
    expect(body).toMatchObject({
      event: "dead",
      jobId: job.id,
      tenantId: tenant.id,
      run: { id: run.id, state: "dead", attempt: 1, status: 500 },
    });

    const keys = (await (await tenant.api("/v1/signing-keys")).json()) as { current: string; next: string };
    // A new tenant's: Edgecron-Signature-V2 only, over the receiver's URL and the body.
    expect(hits[1]!.headers["edgecron-signature"]).toBeUndefined();
    const hit = hits[1]!;
    const verify = (secrets: string[]) =>
      verifyRequest({ method: hit.method, url: hit.url, headers: hit.headers, body: hit.body, secrets });
    expect(await verify([keys.current])).toMatchObject({ ok: true, claims: { run_id: `${run.id}:dead`, sub: url } });
    expect(await verify(["whsec_someone_else"])).toMatchObject({ ok: false });

    await vi.waitFor(async () => expect(await outbox(job)).toEqual([]), { timeout: 5_000, interval: 100 });
  });

  it("failed and recovered: a success after failures is a recovery; a success after a success is nothing", async () => {
    const url = receiverPath("notify");
    // 400 is refused for good (failed), then two successes.
    const job = await jobWith("400,200,200", { url, on: ["failed", "recovered"] });
    expect((await runOnce(job)).state).toBe("failed");
    expect((await runOnce(job)).state).toBe("succeeded");
    expect((await runOnce(job)).state).toBe("succeeded");
    const hits = await received(url, 2);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const events = (await hitsOf(url)).map((h) => JSON.parse(h.body) as { event: string; detail?: string });
    expect(events.map((e) => e.event)).toEqual(["failed", "recovered"]);
    expect(events[1]!.detail).toContain("after 1 runs in a row");
    expect(hits).toHaveLength(2);
  });

  it("an auto-pause is notified with its reason", async () => {
    const url = receiverPath("notify");
    const job = await jobWith("500", { url, on: ["paused"] }, { pauseAfterFailures: 1 });
    await runOnce(job);
    const [hit] = await received(url, 1);
    expect(JSON.parse(hit!.body)).toMatchObject({ event: "paused", run: null, detail: expect.stringContaining("pauseAfterFailures") });
  });

  it("a notification whose send the Queue refused goes out again from the outbox when its resend time comes", async () => {
    const url = receiverPath("notify");
    const job = await jobWith("500", { url, on: ["dead"] });
    armFault("shard.notifySend", Infinity, job.shard);
    try {
      await runOnce(job);
      await vi.waitFor(async () => expect(await outbox(job)).toHaveLength(1), { timeout: 5_000, interval: 50 });
    } finally {
      disarmFault("shard.notifySend", job.shard);
    }
    expect(await hitsOf(url)).toHaveLength(0);
    // Its resend time, now: the alarm sends it again.
    await runInDurableObject(shardOf(job), (_s: Shard, state) => {
      state.storage.sql.exec("UPDATE notifications SET due_at = ? WHERE job_id = ?", Date.now() - 1, job.id);
      return state.storage.setAlarm(Date.now() - 1);
    });
    await runDurableObjectAlarm(shardOf(job));
    const [hit] = await received(url, 1);
    expect(JSON.parse(hit!.body)).toMatchObject({ event: "dead" });
    await vi.waitFor(async () => expect(await outbox(job)).toEqual([]), { timeout: 5_000, interval: 100 });
  });

  it("only the events asked for; a job without notify writes no notification", async () => {
    const url = receiverPath("notify");
    const job = await jobWith("500", { url, on: ["recovered"] });
    await runOnce(job);
    const plain = await jobWith("500", undefined as unknown as Record<string, unknown>);
    await runOnce(plain);
    expect(await outbox(job)).toEqual([]);
    expect(await outbox(plain)).toEqual([]);
    expect(await hitsOf(url)).toEqual([]);
  });

  it("a tenant's default notifications: its jobs without their own notify use them; a job's own wins", async () => {
    const tenant = await createTenant();
    const tenantUrl = receiverPath("notify-tenant");
    const ownUrl = receiverPath("notify-own");
    // The tenant sets its own default; its limits stay the admin's to change.
    const set = await tenant.api(`/v1/tenants/${tenant.id}`, { method: "PATCH", json: { notify: { url: tenantUrl, on: ["dead"] } } });
    expect(set.status, await set.clone().text()).toBe(200);
    expect(await set.json()).toMatchObject({ notify: { url: tenantUrl, on: ["dead"] } });
    expect((await tenant.api(`/v1/tenants/${tenant.id}`, { method: "PATCH", json: { limits: { maxJobs: 5 } } })).status).toBe(403);

    const plain = await jobWith("500", undefined as unknown as Record<string, unknown>, {}, tenant.api);
    const own = await jobWith("500", { url: ownUrl, on: ["dead"] }, {}, tenant.api);
    const plainRun = await runOnce(plain);
    const ownRun = await runOnce(own);
    const [hit] = await received(tenantUrl, 1);
    expect(JSON.parse(hit!.body)).toMatchObject({ event: "dead", jobId: plain.id, run: { id: plainRun.id } });
    const [ownHit] = await received(ownUrl, 1);
    expect(JSON.parse(ownHit!.body)).toMatchObject({ jobId: own.id, run: { id: ownRun.id } });
    expect(await hitsOf(tenantUrl)).toHaveLength(1);

    // Taken away: the next failure of the plain job tells no one.
    expect((await tenant.api(`/v1/tenants/${tenant.id}`, { method: "PATCH", json: { notify: null } })).status).toBe(200);
    await runOnce(plain);
    expect(await outbox(plain)).toEqual([]);
    expect(await hitsOf(tenantUrl)).toHaveLength(1);
  });

  it("a receiver's URL, the job's and the tenant's, is sealed at rest: D1, the shard and its outbox hold only its origin", async () => {
    const tenant = await createTenant();
    const ownUrl = receiverPath("notify-sealed", "token=own-secret");
    const tenantUrl = receiverPath("notify-sealed-tenant", "token=tenant-secret");
    expect(
      (await tenant.api(`/v1/tenants/${tenant.id}`, { method: "PATCH", json: { notify: { url: tenantUrl, on: ["dead"] } } })).status,
    ).toBe(200);
    const own = await jobWith("500", { url: ownUrl, on: ["dead"] }, {}, tenant.api);
    const plain = await jobWith("500", undefined as unknown as Record<string, unknown>, {}, tenant.api);
    // With the Queue refusing, the notifications stay in their outboxes, where the test reads them.
    armFault("shard.notifySend", Infinity);
    const jobs = [own, plain];
    try {
      for (const job of jobs) await runOnce(job);
      for (const job of jobs) await vi.waitFor(async () => expect(await outbox(job)).toHaveLength(1), { timeout: 5_000, interval: 50 });
    } finally {
      disarmFault("shard.notifySend");
    }
    const inShard = (job: Job) =>
      runInDurableObject(shardOf(job), (_s: Shard, state) => [
        ...state.storage.sql.exec("SELECT spec AS text FROM jobs WHERE id = ?", job.id).toArray(),
        ...state.storage.sql.exec("SELECT notify AS text FROM tenants WHERE id = ?", tenant.id).toArray(),
        ...state.storage.sql.exec("SELECT url AS text FROM notifications WHERE job_id = ?", job.id).toArray(),
      ]);
    const stored = [
      ...(await env.DB.prepare("SELECT spec AS text FROM jobs WHERE id IN (?, ?)").bind(own.id, plain.id).all()).results,
      ...(await env.DB.prepare("SELECT notify AS text FROM tenants WHERE id = ?").bind(tenant.id).all()).results,
      ...(await inShard(own)),
      ...(await inShard(plain)),
    ].map((r) => String(r.text));
    expect(stored).toHaveLength(2 + 1 + 3 + 3);
    const parts = [ownUrl, tenantUrl].flatMap((url) => [new URL(url).pathname, new URL(url).search]);
    for (const text of stored) for (const part of parts) expect(text).not.toContain(part);
    // The tenant's row, its shard copies and both outbox rows hold the sealed URL.
    expect(stored.filter((text) => text.includes('"kid"'))).toHaveLength(stored.length);

    // The API shows both whole, and both are delivered, once the outbox sends again.
    expect(await (await tenant.api(`/v1/jobs/${own.id}`)).json()).toMatchObject({ notify: { url: ownUrl } });
    expect(await (await tenant.api(`/v1/tenants/${tenant.id}`)).json()).toMatchObject({ notify: { url: tenantUrl } });
    for (const job of jobs) {
      await runInDurableObject(shardOf(job), (_s: Shard, state) => {
        state.storage.sql.exec("UPDATE notifications SET due_at = ? WHERE job_id = ?", Date.now() - 1, job.id);
        return state.storage.setAlarm(Date.now() - 1);
      });
      await runDurableObjectAlarm(shardOf(job));
    }
    await received(ownUrl, 1);
    await received(tenantUrl, 1);
  });

  it.each([
    [{ url: "not a url" }, "notify.url"],
    [{ url: "ftp://example.com/x" }, "notify.url"],
    [{ url: "https://example.com/x", on: [] }, "notify.on"],
    [{ url: "https://example.com/x", on: ["exploded"] }, "notify.on.0"],
    [{ url: "https://example.com/x", on: ["dead", "dead"] }, "notify.on"],
    [{ url: "https://example.com/x", extra: 1 }, "notify"],
  ])("notify %j → 400 naming %s", async (notify, path) => {
    const res = await api("/v1/jobs", { method: "POST", json: { schedule: FAR_CRON, target: { url: receiverPath("x") }, notify } });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { issues: Array<{ path: string }> } };
    expect(body.error.issues.map((i) => i.path)).toContain(path);
  });

  it("PATCH sets notify with its default events, and null clears it", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("x") } });
    const set = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { notify: { url: "https://example.com/hook" } } });
    expect(await set.json()).toMatchObject({ notify: { url: "https://example.com/hook", on: ["failed", "dead", "paused", "recovered"] } });
    const cleared = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { notify: null } });
    expect(await cleared.json()).not.toHaveProperty("notify");
  });
});
