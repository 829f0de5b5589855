/**
 * After ENCRYPTION_KEYS gets a new first key, the sweep seals every target again under it in the
 * background (src/reconcile/resealing.ts), so the old key can be dropped; how many are left is
 * what GET /metrics shows. Against the real D1 and shards in workerd.
 */
import { createExecutionContext, createMessageBatch, env, getQueueResult, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { countSealedUnderAnotherKey } from "../../src/catalog/jobs";
import { readSweepState } from "../../src/catalog/sweep-state";
import { armFault, disarmFault } from "../../src/faults";
import worker from "../../src/index";
import type { Job, JobSpec, StoredNotify } from "../../src/model/job";
import type { DispatchMessage } from "../../src/protocol/queue-messages";
import type { CallbackOptions, SealedCallback } from "../../src/qstash/meta";
import { openCallback } from "../../src/qstash/sealed-callbacks";
import { roundMark } from "../../src/reconcile/resealing";
import { sweep } from "../../src/reconcile/sweep";
import { viewNotify } from "../../src/security/notify-urls";
import { loadKeyRing, seal } from "../../src/security/sealing";
import { openTarget } from "../../src/security/targets";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, createTenant, FAR_CRON, fireNow, hitsOf, receiverPath, shardOf } from "./helpers";

/** A fresh 32-byte key under `kid`, as an ENCRYPTION_KEYS entry. */
function keyEntry(kid: string): string {
  return `${kid}:${btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))))}`;
}

// The rotations of this file, in order: a later test's ring holds the earlier ones' keys.
const K2 = keyEntry("k2");
const K3 = keyEntry("k3");
const K4 = keyEntry("k4");

type SealedTarget = { url?: string; origin?: string; secrets: { kid: string } | null };
type SealedSpec = { target?: SealedTarget; steps?: Array<{ target: SealedTarget }> };

/** The key ids of a job's sealed targets in D1, its version, and its spec. */
async function stored(jobId: string) {
  const row = await env.DB.prepare("SELECT spec, version, shard FROM jobs WHERE id = ?")
    .bind(jobId)
    .first<{ spec: string; version: number; shard: string }>();
  const spec = JSON.parse(row!.spec) as SealedSpec;
  const kids = [spec.target, ...(spec.steps ?? []).map((s) => s.target)].flatMap((t) => (t?.secrets ? [t.secrets.kid] : []));
  return { kids, version: row!.version, shard: row!.shard, spec };
}

const TARGET = { url: receiverPath("reseal"), headers: { Authorization: "Bearer reseal-secret" }, body: { keep: "me" } };

describe("re-sealing after a rotation of ENCRYPTION_KEYS", () => {
  it("seals every target and step again under the new first key, a page per sweep, and counts down to 0", async () => {
    const stepUrl = receiverPath("reseal-a");
    const jobs = [
      await createJob({ schedule: FAR_CRON, target: TARGET }),
      await createJob({ schedule: FAR_CRON, target: { ...TARGET, body: "two" } }),
      await createJob({
        schedule: FAR_CRON,
        steps: [
          { id: "a", target: { url: stepUrl, headers: { "X-Key": "step-secret" } } },
          { id: "b", after: ["a"], target: { url: receiverPath("reseal-b"), body: { step: "b" } } },
        ],
      }),
    ];
    const before = await Promise.all(jobs.map((j) => stored(j.id)));
    for (const b of before) expect(new Set(b.kids)).toEqual(new Set(["t1"]));

    // Nothing to do under the key everything is sealed with: the search runs once, then is skipped.
    await sweep(env);
    expect((await readSweepState(env.DB)).reseal).toMatchObject({ under: roundMark("t1"), remaining: 0 });
    expect((await sweep(env)).targetsResealed).toBe(0);

    const rotated = { ...env, ENCRYPTION_KEYS: `${K2},${env.ENCRYPTION_KEYS}` };
    // A small budget: a page of jobs per sweep, so the round spans several sweeps.
    let resealed = 0;
    let sweeps = 0;
    while ((await readSweepState(env.DB)).reseal.under !== roundMark("k2")) {
      expect(++sweeps, "sweeps").toBeLessThan(20);
      resealed += (await sweep(rotated, { d1Queries: 6, shardCalls: 20 })).targetsResealed;
    }
    expect(sweeps).toBeGreaterThan(1);
    expect(resealed).toBe(jobs.length);
    expect((await readSweepState(env.DB)).reseal).toMatchObject({ under: roundMark("k2"), remaining: 0 });

    for (const [i, job] of jobs.entries()) {
      const after = await stored(job.id);
      expect(new Set(after.kids), job.id).toEqual(new Set(["k2"]));
      expect(after.version).toBe(before[i]!.version + 1);
    }
    // The same secrets, opened with the new key alone.
    const onlyNew = rotated.ENCRYPTION_KEYS.split(",")[0]!;
    const first = (await stored(jobs[0]!.id)).spec.target as Parameters<typeof openTarget>[1];
    expect(await openTarget(onlyNew, first, jobs[0]!.id)).toEqual({ url: TARGET.url, headers: TARGET.headers, body: TARGET.body });
    const steps = (await stored(jobs[2]!.id)).spec.steps as Array<{ target: Parameters<typeof openTarget>[1] }>;
    expect(await openTarget(onlyNew, steps[0]!.target, jobs[2]!.id)).toEqual({
      url: stepUrl,
      headers: { "X-Key": "step-secret" },
    });

    // The change feed hands each new version to its shard.
    await sweep(rotated);
    for (const job of jobs) {
      const kid = await runInDurableObject(shardOf(job), (_s: Shard, state) => {
        const spec = JSON.parse(state.storage.sql.exec("SELECT spec FROM jobs WHERE id = ?", job.id).one().spec as string) as SealedSpec;
        return (spec.target ?? spec.steps![0]!.target).secrets!.kid;
      });
      expect(kid, job.id).toBe("k2");
    }
    // Done: later sweeps do not search again.
    expect((await sweep(rotated)).targetsResealed).toBe(0);
  });

  it("a target whose key already left the ring stays counted, and the round goes on past it", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: TARGET });
    await sweep(env);
    // A ring without t1: this job (and those of the test above, under k2) cannot be opened.
    const lost = { ...env, ENCRYPTION_KEYS: K3 };
    const report = await sweep(lost);
    expect(report.targetsResealed).toBe(0);
    const state = await readSweepState(env.DB);
    expect(state.reseal.under).toBeNull();
    expect(state.reseal.remaining).toBeGreaterThanOrEqual(1);
    expect((await stored(job.id)).kids).toEqual(["t1"]);
    // The metrics show what is left.
    const metrics = await (await api("/metrics")).text();
    expect(metrics).toContain(`edgecron_targets_sealed_under_old_keys ${state.reseal.remaining}`);

    // With t1 back in the ring, behind k3, this job is re-sealed under k3.
    const k3 = lost.ENCRYPTION_KEYS;
    const fixed = { ...env, ENCRYPTION_KEYS: `${k3},${env.ENCRYPTION_KEYS}` };
    for (let i = 0; i < 5 && (await readSweepState(env.DB)).reseal.under !== roundMark("k3"); i++) await sweep(fixed);
    expect((await stored(job.id)).kids).toEqual(["k3"]);
    const after = await readSweepState(env.DB);
    // The first test's jobs are under k2, which this ring lacks: they are what remains.
    expect(after.reseal.remaining).toBeGreaterThan(0);
  });

  it("a target stored before URLs were sealed has its URL sealed, though a round had finished under the same key", async () => {
    const url = `${receiverPath("reseal-url")}?token=in-the-query`;
    const job = await createJob({ schedule: FAR_CRON, target: { ...TARGET, url } });
    // As the release before stored it: the URL in clear beside headers and body sealed, and its round done under t1.
    const ring = await loadKeyRing(env.ENCRYPTION_KEYS);
    const old = {
      url,
      method: "POST",
      headerNames: ["Authorization"],
      secrets: await seal(ring, { headers: TARGET.headers, body: TARGET.body }, job.id),
    };
    const { spec } = await stored(job.id);
    await env.DB.prepare("UPDATE jobs SET spec = ? WHERE id = ?")
      .bind(JSON.stringify({ ...spec, target: old }), job.id)
      .run();
    await env.DB.prepare("UPDATE sweep_state SET resealed_under = 't1', reseal_after = '' WHERE id = 1").run();
    expect((await countSealedUnderAnotherKey(env.DB, "t1")) > 0).toBe(true);

    for (let i = 0; i < 5 && (await stored(job.id)).spec.target!.url !== undefined; i++) await sweep(env);
    const after = (await stored(job.id)).spec.target!;
    expect(after).not.toHaveProperty("url");
    expect(after.origin).toBe(new URL(url).origin);
    expect(JSON.stringify(after)).not.toContain("in-the-query");
    expect(await openTarget(env.ENCRYPTION_KEYS, after as Parameters<typeof openTarget>[1], job.id)).toEqual({
      url,
      headers: TARGET.headers,
      body: TARGET.body,
    });
    // Its shard gets the sealed URL too.
    await sweep(env);
    const inShard = await runInDurableObject(
      shardOf(job),
      (_s: Shard, state) => state.storage.sql.exec("SELECT spec FROM jobs WHERE id = ?", job.id).one().spec as string,
    );
    expect(inShard).not.toContain("in-the-query");
  });

  it("notification URLs stored in clear, a job's and a tenant's, are sealed by the sweep and still open", async () => {
    const tenant = await createTenant();
    const jobUrl = `${receiverPath("reseal-notify")}?token=job-receiver`;
    const tenantUrl = `${receiverPath("reseal-notify-tenant")}?token=tenant-receiver`;
    const job = await createJob({ schedule: FAR_CRON, target: TARGET, notify: { url: jobUrl, on: ["dead"] } }, tenant.api);
    // As the release before stored them: the URLs in clear, and its round done under t1.
    const { spec } = await stored(job.id);
    await env.DB.prepare("UPDATE jobs SET spec = ? WHERE id = ?")
      .bind(JSON.stringify({ ...spec, notify: { url: jobUrl, on: ["dead"] } }), job.id)
      .run();
    await env.DB.prepare("UPDATE tenants SET notify = ? WHERE id = ?")
      .bind(JSON.stringify({ url: tenantUrl, on: ["dead"] }), tenant.id)
      .run();
    await env.DB.prepare("UPDATE sweep_state SET resealed_under = 't1', reseal_after = '' WHERE id = 1").run();

    const tenantRow = () => env.DB.prepare("SELECT notify FROM tenants WHERE id = ?").bind(tenant.id).first<{ notify: string }>();
    for (let i = 0; i < 5 && (await tenantRow())!.notify.includes("tenant-receiver"); i++) await sweep(env);
    for (let i = 0; i < 5 && JSON.stringify((await stored(job.id)).spec).includes("job-receiver"); i++) await sweep(env);
    const sealedJob = (await stored(job.id)).spec as unknown as { notify: StoredNotify };
    const sealedTenant = JSON.parse((await tenantRow())!.notify) as StoredNotify;
    for (const [notify, url] of [
      [sealedJob.notify, jobUrl],
      [sealedTenant, tenantUrl],
    ] as const) {
      expect(notify).toMatchObject({ origin: new URL(url).origin, on: ["dead"], secrets: { kid: "t1" } });
      expect(JSON.stringify(notify)).not.toContain("receiver");
      expect(await viewNotify(env.ENCRYPTION_KEYS, notify, tenant.id, true)).toEqual({ url, on: ["dead"] });
    }
    // The API shows them whole.
    expect(await (await tenant.api(`/v1/jobs/${job.id}`)).json()).toMatchObject({ notify: { url: jobUrl } });
    expect(await (await tenant.api(`/v1/tenants/${tenant.id}`)).json()).toMatchObject({ notify: { url: tenantUrl } });
  });

  it("a QStash schedule's callbacks stored in clear are sealed by the sweep, though a round had finished under the same key", async () => {
    const tenant = await createTenant();
    const { jobId, callbacks } = await qstashSchedule(tenant, "clear");
    // As the release before sealing callbacks stored them: in clear, and its round done under t1.
    const { spec } = await stored(jobId);
    const qstash = { ...(spec as JobSpec).target!.qstash!, ...callbacks };
    await env.DB.prepare("UPDATE jobs SET spec = ? WHERE id = ?")
      .bind(JSON.stringify({ ...spec, target: { ...spec.target, qstash } }), jobId)
      .run();
    await env.DB.prepare("UPDATE sweep_state SET resealed_under = 't1+url', reseal_after = '' WHERE id = 1").run();

    for (let i = 0; i < 5 && JSON.stringify((await stored(jobId)).spec).includes("callback-secret"); i++) await sweep(env);
    const after = callbacksOf((await stored(jobId)).spec);
    expect(JSON.stringify(after)).not.toContain("callback-secret");
    for (const which of ["callback", "failureCallback"] as const) {
      expect(after[which]).toEqual({ origin: new URL(callbacks[which].url).origin, secrets: expect.objectContaining({ kid: "t1" }) });
      expect(await openCallback(env.ENCRYPTION_KEYS, after[which]!, tenant.id)).toEqual(callbacks[which]);
    }
  });

  it("a QStash schedule's callbacks are sealed again under the new first key, counted until they are, and open without the old key", async () => {
    const tenant = await createTenant();
    const { jobId, callbacks, destination } = await qstashSchedule(tenant, "rotated");
    expect(callbacksOf((await stored(jobId)).spec).callback).toMatchObject({ secrets: { kid: "t1" } });

    // Every key of this file's rotations is in the ring, behind the new one: nothing is left unopened.
    const rotated = { ...env, ENCRYPTION_KEYS: `${K4},${K3},${K2},${env.ENCRYPTION_KEYS}` };
    for (let i = 0; i < 20 && (await readSweepState(env.DB)).reseal.under !== roundMark("k4"); i++) await sweep(rotated);
    expect((await readSweepState(env.DB)).reseal).toMatchObject({ under: roundMark("k4"), remaining: 0 });
    expect(await (await api("/metrics")).text()).toContain("edgecron_targets_sealed_under_old_keys 0");
    // 0 means done: the callbacks too are under k4, in D1 and, once the change feed ran, in the shard.
    await sweep(rotated);
    const inShard = await runInDurableObject(
      shardOf({ shard: (await stored(jobId)).shard }),
      (_s: Shard, state) => state.storage.sql.exec("SELECT spec FROM jobs WHERE id = ?", jobId).one().spec as string,
    );
    for (const spec of [(await stored(jobId)).spec, JSON.parse(inShard) as SealedSpec]) {
      const sealed = callbacksOf(spec);
      for (const which of ["callback", "failureCallback"] as const) expect(sealed[which]!.secrets.kid, which).toBe("k4");
    }

    // The old keys dropped: the schedule fires, its destination is called, and its callback is
    // opened and published (its own message, a day out, held by the shard).
    const onlyNew = { ...env, ENCRYPTION_KEYS: K4 };
    const shard = (await stored(jobId)).shard;
    await deliverOnce({ id: jobId, shard }, onlyNew);
    expect(await hitsOf(destination)).toHaveLength(1);
    const published = await runInDurableObject(
      shardOf({ shard }),
      (_s: Shard, state) =>
        state.storage.sql
          .exec(
            "SELECT id, spec FROM jobs WHERE standalone = 1 AND tenant_id = ? AND json_extract(spec, '$.target.qstash.callbackOf') IS NOT NULL",
            tenant.id,
          )
          .toArray() as Array<{ id: string; spec: string }>,
    );
    expect(published).toHaveLength(1);
    const target = (JSON.parse(published[0]!.spec) as JobSpec).target!;
    const opened = await openTarget(K4, target as Parameters<typeof openTarget>[1], published[0]!.id);
    expect(opened.url).toBe(callbacks.callback.url);
    expect(opened.headers).toMatchObject(callbacks.callback.headers);
    expect(await openCallback(K4, callbacksOf(JSON.parse(inShard) as SealedSpec).failureCallback!, tenant.id)).toEqual(
      callbacks.failureCallback,
    );
  });
});

type Tenant = Awaited<ReturnType<typeof createTenant>>;
type StoredCallbacks = { callback?: SealedCallback; failureCallback?: SealedCallback };

const callbacksOf = (spec: SealedSpec) => (spec as JobSpec).target!.qstash! as StoredCallbacks;

/** A QStash schedule with a callback and a failure callback, each with a credential in its URL and a forwarded header. */
async function qstashSchedule(tenant: Tenant, name: string) {
  const destination = receiverPath(`reseal-schedule-${name}`);
  const callbacks = {
    callback: {
      url: receiverPath(`reseal-callback-${name}`, "token=callback-secret"),
      delayMs: 86_400_000,
      headers: { authorization: "Bearer callback-secret-header" }, // forwarded headers are kept by lowercase name
    },
    failureCallback: {
      url: receiverPath(`reseal-failure-${name}`, "token=failure-callback-secret"),
      headers: { "x-key": "failure-callback-secret-header" },
    },
  } satisfies Record<string, CallbackOptions>;
  const res = await tenant.api(`/v2/schedules/${destination}`, {
    method: "POST",
    headers: {
      "Upstash-Cron": "0 0 1 1 *",
      "Upstash-Callback": callbacks.callback.url,
      "Upstash-Callback-Delay": "1d",
      "Upstash-Callback-Forward-Authorization": callbacks.callback.headers.authorization,
      "Upstash-Failure-Callback": callbacks.failureCallback.url,
      "Upstash-Failure-Callback-Forward-X-Key": callbacks.failureCallback.headers["x-key"],
    },
    body: "tick",
  });
  expect(res.status, await res.clone().text()).toBe(200);
  const { scheduleId } = (await res.json()) as { scheduleId: string };
  const row = await env.DB.prepare("SELECT job_id FROM qstash_schedules WHERE tenant_id = ? AND schedule_id = ?")
    .bind(tenant.id, scheduleId)
    .first<{ job_id: string }>();
  return { jobId: row!.job_id, callbacks, destination };
}

/**
 * Fires the job once, its dispatch held back from the real queue (whose consumer has the test's
 * own ENCRYPTION_KEYS), and hands it to the consumer with `env`'s.
 */
async function deliverOnce(job: { id: string; shard: string }, withEnv: Env): Promise<void> {
  armFault("shard.queueSend", Infinity, job.shard);
  try {
    const due = await fireNow(job as Job);
    const [run] = await runInDurableObject(
      shardOf(job),
      (_s: Shard, state) =>
        state.storage.sql.exec("SELECT id, fence FROM runs WHERE job_id = ? AND scheduled_at = ?", job.id, due).toArray() as Array<{
          id: string;
          fence: number;
        }>,
    );
    const batch = createMessageBatch<DispatchMessage>("edgecron-runs", [
      { id: "m0", timestamp: new Date(), attempts: 1, body: { shard: job.shard, runId: run!.id, fence: run!.fence } },
    ]);
    const ctx = createExecutionContext();
    await (worker as ExportedHandler<Env, DispatchMessage>).queue!(batch, withEnv, ctx);
    expect((await getQueueResult(batch, ctx)).explicitAcks).toEqual(["m0"]);
  } finally {
    disarmFault("shard.queueSend", job.shard);
  }
}
