import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { insertJob } from "../../src/catalog/jobs";
import { DEFAULT_TENANT, newJobId, shardFor } from "../../src/model/ids";
import { CreateJobSchema, type Job } from "../../src/model/job";
import { sealTarget } from "../../src/security/targets";
import type { Shard } from "../../src/shard/shard";
import {
  api,
  createJob,
  createTenant,
  FAR_CRON,
  fireHeld,
  fireInFlight,
  fireNow,
  getRun,
  hitsOf,
  listRuns,
  makeRunDue,
  receiverPath,
  shardOf,
  sweepFully,
  waitForRun,
} from "./helpers";

async function post(path: string): Promise<Response> {
  return api(path, { method: "POST" });
}

describe("pause and resume", () => {
  it("a paused job does not fire, and its run whose dispatch has not gone out is cancelled", async () => {
    const url = receiverPath("pause");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    const stub = shardOf(job);
    // The run is dispatched, but its dispatch is still in the shard (the queue refused it) when the pause arrives.
    await fireHeld(job);
    const [run] = await listRuns(job.id);
    expect(run).toMatchObject({ state: "running" });
    const paused = await post(`/v1/jobs/${job.id}/pause`);
    expect(paused.status).toBe(200);
    expect(await paused.json()).toMatchObject({ paused: true, nextRunAt: null, version: 2 });

    // The dispatch is withdrawn: its run ends cancelled, and any copy of it is stale.
    expect(await getRun(run!.id)).toMatchObject({ state: "cancelled", error: "job paused" });
    expect(await stub.open([{ runId: run!.id, fence: 1 }])).toEqual([{ result: "stale", runId: run!.id, fence: 1 }]);

    // A fire that comes due while paused does nothing.
    await fireNow(job);
    expect(await listRuns(job.id)).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 2_500)); // the shard's send retry, and a queue batch window
    expect(await hitsOf(url)).toHaveLength(0);
  });

  it("resume keeps the job's place on its schedule (missed fires follow the misfire policy)", async () => {
    const job = await createJob({ schedule: { every: "1h" }, target: { url: receiverPath("resume") } });
    expect((await post(`/v1/jobs/${job.id}/pause`)).status).toBe(200);
    const before = Date.now();
    const res = await post(`/v1/jobs/${job.id}/resume`);
    expect(res.status).toBe(200);
    const resumed = (await res.json()) as Job;
    expect(resumed).toMatchObject({ paused: false, version: 3 });
    expect(Date.parse(resumed.nextRunAt!)).toBeGreaterThan(before);
  });

  it("pausing twice is harmless and keeps the version", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("p2") } });
    await post(`/v1/jobs/${job.id}/pause`);
    const again = await post(`/v1/jobs/${job.id}/pause`);
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ paused: true, version: 2 });
  });
});

describe("a pause or delete during an attempt", () => {
  it.each([
    ["pause", (id: string) => post(`/v1/jobs/${id}/pause`), "job paused"],
    ["delete", (id: string) => api(`/v1/jobs/${id}`, { method: "DELETE" }), "job deleted"],
  ] as const)("%s: the attempt's failure is not retried; the run ends cancelled", async (_label, stop, reason) => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("mid") }, retry: { maxAttempts: 5 } });
    await fireInFlight(job);
    const [run] = await listRuns(job.id);
    const stub = shardOf(job);
    expect(run).toMatchObject({ state: "running" }); // the attempt is in flight: it began with the dispatch
    expect((await stop(job.id)).status).toBe(200);

    expect(await stub.report([{ runId: run!.id, fence: 1, ok: false, status: 500, error: "HTTP 500" }])).toEqual(["recorded"]);
    const after = await getRun(run!.id);
    expect(after).toMatchObject({ state: "cancelled", status: 500, error: `HTTP 500; not retried: ${reason}` });
    expect(after.attemptLog!.map((a) => a.outcome)).toEqual(["failed"]);
  });

  it("an in-flight attempt whose lease expires after a delete is not retried either", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("mid-lease") }, retry: { maxAttempts: 5 } });
    await fireInFlight(job);
    const [run] = await listRuns(job.id);
    expect((await api(`/v1/jobs/${job.id}`, { method: "DELETE" })).status).toBe(200);
    await makeRunDue(job, run!.id);
    expect(await getRun(run!.id)).toMatchObject({ state: "cancelled", error: expect.stringContaining("not retried: job deleted") });
  });

  it("a paused job cannot be triggered by hand (409)", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("mid-trigger") } });
    await post(`/v1/jobs/${job.id}/pause`);
    const res = await post(`/v1/jobs/${job.id}/trigger`);
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({ error: { code: "job_paused" } });
    expect(await listRuns(job.id)).toHaveLength(0);
  });
});

describe("delete", () => {
  it("no run starts after the delete is answered; the job 404s, its runs stay readable", async () => {
    const url = receiverPath("delete");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    const stub = shardOf(job);
    await fireHeld(job);
    const [run] = await listRuns(job.id);

    const res = await api(`/v1/jobs/${job.id}`, { method: "DELETE" });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: job.id, deleted: true });

    expect((await stub.open([{ runId: run!.id, fence: 1 }]))[0]!.result).toBe("stale");
    expect((await api(`/v1/jobs/${job.id}`)).status).toBe(404);
    expect((await api(`/v1/jobs`)).ok).toBe(true);
    const listed = (await (await api(`/v1/jobs?limit=200`)).json()) as { items: Job[] };
    expect(listed.items.map((j) => j.id)).not.toContain(job.id);
    expect(await getRun(run!.id)).toMatchObject({ state: "cancelled", error: "job deleted" });
    expect((await post(`/v1/jobs/${job.id}/trigger`)).status).toBe(404);

    // Even a fire time left behind does nothing.
    await fireNow(job);
    expect(await listRuns(job.id)).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 2_500));
    expect(await hitsOf(url)).toHaveLength(0);
  });
});

describe("trigger", () => {
  it("runs the job once now, besides its schedule", async () => {
    const url = receiverPath("trigger");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    const res = await post(`/v1/jobs/${job.id}/trigger`);
    expect(res.status).toBe(202);
    const run = (await res.json()) as { id: string; trigger: string; state: string };
    expect(run).toMatchObject({ trigger: "manual", state: "running" }); // dispatched as it was made: its attempt began
    await waitForRun(run.id, ["succeeded"]);
    const hits = await hitsOf(url);
    expect(hits).toHaveLength(1);
    expect(hits[0]!.headers["idempotency-key"]).toBe(run.id);
    // The schedule is untouched.
    const after = (await (await api(`/v1/jobs/${job.id}`)).json()) as Job;
    expect(after.nextRunAt).toBe(job.nextRunAt);
  });

  it("the same Idempotency-Key yields the same run, executed once", async () => {
    const url = receiverPath("trigger-key");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    const headers = { "Idempotency-Key": "deploy-42" };
    const first = (await (await api(`/v1/jobs/${job.id}/trigger`, { method: "POST", headers })).json()) as { id: string };
    const second = (await (await api(`/v1/jobs/${job.id}/trigger`, { method: "POST", headers })).json()) as { id: string };
    expect(second.id).toBe(first.id);
    await waitForRun(first.id, ["succeeded"]);
    expect(await hitsOf(url)).toHaveLength(1);
    expect(await listRuns(job.id)).toHaveLength(1);
  });

  it("two different triggers make two runs", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("trigger-2") } });
    const a = (await (await post(`/v1/jobs/${job.id}/trigger`)).json()) as { id: string };
    const b = (await (await post(`/v1/jobs/${job.id}/trigger`)).json()) as { id: string };
    expect(a.id).not.toBe(b.id);
    expect(await listRuns(job.id)).toHaveLength(2);
  });
});

describe("the reconciliation sweep", () => {
  const runSweep = sweepFully;

  it("hands the shard a job whose shard call never happened, and it fires", async () => {
    // The crash: the catalog row is written, the shard never hears of it.
    const now = Date.now();
    const id = newJobId(now);
    const url = receiverPath("sweep");
    const shard = shardFor(id, Number(env.SHARD_COUNT));
    const {
      target,
      steps: _steps,
      ...spec
    } = CreateJobSchema.parse({ schedule: { at: new Date(now - 1_000).toISOString() }, target: { url } });
    await insertJob(env.DB, {
      id,
      tenantId: DEFAULT_TENANT,
      name: "orphan",
      shard,
      version: 1,
      spec: { ...spec, target: await sealTarget(env.ENCRYPTION_KEYS, target!, id) },
      paused: false,
      pausedReason: null,
      createdAt: now,
      updatedAt: now,
      deletedAt: null,
    });
    expect(await listRuns(id)).toHaveLength(0);

    await runSweep();
    const runs = await listRuns(id);
    expect(runs).toHaveLength(1);
    await waitForRun(runs[0]!.id, ["succeeded"]);
    expect(await hitsOf(url)).toHaveLength(1);

    // A second sweep changes nothing: the shard holds the job at the catalog's version.
    await runSweep();
    expect(await listRuns(id)).toHaveLength(1);
  });

  it("carries a delete the shard missed", async () => {
    const job = await createJob({ schedule: { every: "1h" }, target: { url: receiverPath("sweep-del") } });
    // The catalog records the delete, the shard call is lost.
    await env.DB.prepare("UPDATE jobs SET deleted_at = ?, version = version + 1 WHERE id = ?").bind(Date.now(), job.id).run();
    await runSweep();
    const held = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT deleted, version, next_fire_at FROM jobs WHERE id = ?", job.id).one(),
    );
    expect(held).toEqual({ deleted: 1, version: 2, next_fire_at: null });
  });

  it("hands shards the tenant settings they missed (a rotation or limit change whose push was lost)", async () => {
    const tenant = await createTenant();
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("sweep-tenant") } }, tenant.api);
    const held = () =>
      runInDurableObject(shardOf(job), (_s: Shard, state) =>
        state.storage.sql.exec("SELECT signing_generation, max_in_flight FROM tenants WHERE id = ?", tenant.id).one(),
      );
    expect(await held()).toEqual({ signing_generation: 1, max_in_flight: 1_000 });
    // The catalog changes; the push to the shard is lost.
    await env.DB.prepare("UPDATE tenants SET signing_generation = 2, max_runs_in_flight = 5, version = version + 1 WHERE id = ?")
      .bind(tenant.id)
      .run();
    await runSweep();
    expect(await held()).toEqual({ signing_generation: 2, max_in_flight: 5 });
  });

  it("seals targets stored in clear by the release before sealing, in D1 and in the shard, and they still run", async () => {
    const url = receiverPath("sweep-seal");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    const legacy = { url, method: "POST", headers: { Authorization: "Bearer legacy-secret" }, body: { k: "legacy-body" } };
    // As an earlier release stored it: the target whole, in clear, in both places.
    const row = await env.DB.prepare("SELECT spec FROM jobs WHERE id = ?").bind(job.id).first<{ spec: string }>();
    const spec = JSON.stringify({ ...JSON.parse(row!.spec), target: legacy });
    await env.DB.prepare("UPDATE jobs SET spec = ? WHERE id = ?").bind(spec, job.id).run();
    // And the sweep has not yet searched this catalog for targets in clear, as on the upgrade
    // (an earlier sweep in this file found none and stopped looking).
    await env.DB.prepare("UPDATE sweep_state SET targets_sealed = 0").run();
    const shardSpec = () =>
      runInDurableObject(shardOf(job), (_s: Shard, state) =>
        state.storage.sql.exec("SELECT spec, version FROM jobs WHERE id = ?", job.id).one(),
      );
    await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("UPDATE jobs SET spec = ? WHERE id = ?", spec, job.id),
    );

    await runSweep();
    const stored = await env.DB.prepare("SELECT spec, version FROM jobs WHERE id = ?")
      .bind(job.id)
      .first<{ spec: string; version: number }>();
    const held = await shardSpec();
    for (const text of [stored!.spec, held.spec as string]) {
      expect(text).not.toContain("legacy-secret");
      expect(text).not.toContain("legacy-body");
      expect(JSON.parse(text).target).toMatchObject({ headerNames: ["Authorization"], secrets: { kid: "t1" } });
    }
    expect([stored!.version, held.version]).toEqual([2, 2]);

    await fireNow(job);
    const [hit] = await vi.waitFor(async () => {
      const hits = await hitsOf(url);
      if (hits.length === 0) throw new Error("not called yet");
      return hits;
    });
    expect(hit!.headers.authorization).toBe("Bearer legacy-secret");
    expect(JSON.parse(hit!.body)).toEqual({ k: "legacy-body" });
  });

  it("re-asserts a lost alarm: due work runs at once", async () => {
    const url = receiverPath("sweep-alarm");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    const stub = shardOf(job);
    await runInDurableObject(stub, async (_s: Shard, state) => {
      state.storage.sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", Date.now() - 1, job.id);
      await state.storage.deleteAlarm(); // the alarm is lost
    });
    await runSweep();
    const runs = await listRuns(job.id);
    expect(runs).toHaveLength(1);
    await waitForRun(runs[0]!.id, ["succeeded"]);
    // And the shard has an alarm again, at its next fire.
    const alarm = await runInDurableObject(stub, (_s: Shard, state) => state.storage.getAlarm());
    expect(alarm).not.toBeNull();
  });
});
