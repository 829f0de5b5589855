import { createExecutionContext, createMessageBatch, env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import worker from "../../src/index";
import { chainDepthOf } from "../../src/model/ids";
import { type Job, MAX_CHAIN_DEPTH } from "../../src/model/job";
import type { Run } from "../../src/model/run";
import type { ChainMessage, QueueMessage } from "../../src/protocol/queue-messages";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, createTenant, FAR_CRON, listRuns, receiverPath, shardOf, waitForRun } from "./helpers";

/**
 * Chained jobs (issue 11, part 6): a job's onSuccess/onFailure jobs are triggered once per run
 * that ends so, through the shard's outbox, the real queue and consumer, and the chained job's
 * own shard, whatever shard that is.
 */

const handler = worker as ExportedHandler<Env, QueueMessage>;

async function newJob(name: string, extra: Record<string, unknown> = {}, query = ""): Promise<Job> {
  return createJob({ schedule: FAR_CRON, target: { url: receiverPath(name, query) }, retry: { maxAttempts: 1 }, ...extra });
}

async function trigger(job: Job): Promise<Run> {
  const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
  expect(res.status, await res.clone().text()).toBe(202);
  return res.json();
}

async function chainedRuns(job: Job): Promise<Run[]> {
  return (await listRuns(job.id)).filter((r) => r.trigger === "chain");
}

/** The chain messages still in a shard's outbox (confirmed ones are removed). */
async function outboxChains(job: Job): Promise<string[]> {
  return runInDurableObject(shardOf(job), (_s: Shard, state) =>
    state.storage.sql
      .exec("SELECT id FROM notifications WHERE kind = 'chain' AND job_id = ?", job.id)
      .toArray()
      .map((r) => r.id as string),
  );
}

const withKey =
  (key: string) =>
  (path: string, init: Parameters<typeof api>[1] = {}) =>
    api(path, { ...init, headers: { ...Object.fromEntries(new Headers(init.headers)), Authorization: `Bearer ${key}` } });

async function expectRefused(res: Response, path: string, reason: RegExp): Promise<void> {
  expect(res.status, await res.clone().text()).toBe(400);
  const body = (await res.json()) as { error: { code: string; issues: Array<{ path: string; message: string }> } };
  expect(body.error.code).toBe("invalid_request");
  expect(body.error.issues[0]!.path).toBe(path);
  expect(body.error.issues[0]!.message).toMatch(reason);
}

/** Delivers one chain message through the Worker's queue handler, as the Queue would. */
async function deliver(message: ChainMessage): Promise<void> {
  const batch = createMessageBatch<QueueMessage>("edgecron-dispatch", [
    { id: crypto.randomUUID(), timestamp: new Date(), attempts: 1, body: message },
  ]);
  await handler.queue!(batch, env, createExecutionContext());
}

describe("chained jobs: onSuccess and onFailure", () => {
  it("a run that succeeds triggers its onSuccess jobs once each, and not its onFailure ones", async () => {
    const [next, alsoNext, alert] = await Promise.all([newJob("next"), newJob("also-next"), newJob("alert")]);
    const job = await newJob("first", { onSuccess: [next.id, alsoNext.id], onFailure: [alert.id] });
    expect(job).toMatchObject({ onSuccess: [next.id, alsoNext.id], onFailure: [alert.id] });

    const run = await trigger(job);
    await waitForRun(run.id, ["succeeded"]);
    for (const chained of [next, alsoNext]) {
      const [triggered] = await vi.waitFor(async () => {
        const runs = await chainedRuns(chained);
        expect(runs).toHaveLength(1);
        return runs;
      });
      expect(triggered).toMatchObject({ trigger: "chain", chainedFrom: run.id });
      const ended = await waitForRun(triggered!.id, ["succeeded"]);
      expect(ended.chainedFrom).toBe(run.id);
    }
    // Delivered and confirmed: the outbox is empty, and the alert job never ran.
    await vi.waitFor(async () => expect(await outboxChains(job)).toEqual([]));
    expect(await listRuns(alert.id)).toEqual([]);
  });

  it("a run that fails triggers its onFailure jobs, and a workflow run's failure does too", async () => {
    const [next, alert] = await Promise.all([newJob("next"), newJob("alert")]);
    const job = await newJob("failing", { onSuccess: [next.id], onFailure: [alert.id] }, "status=500");
    const run = await trigger(job);
    await waitForRun(run.id, ["dead", "failed"]);
    const [triggered] = await vi.waitFor(async () => {
      const runs = await chainedRuns(alert);
      expect(runs).toHaveLength(1);
      return runs;
    });
    expect(triggered!.chainedFrom).toBe(run.id);
    expect(await listRuns(next.id)).toEqual([]);

    const workflow = await createJob({
      schedule: FAR_CRON,
      steps: [
        { id: "a", target: { url: receiverPath("wf-a") } },
        { id: "b", after: ["a"], target: { url: receiverPath("wf-b", "status=400") }, retry: { maxAttempts: 1 } },
      ],
      onFailure: [alert.id],
    });
    const wfRun = await trigger(workflow);
    await waitForRun(wfRun.id, ["failed"]);
    await vi.waitFor(async () => expect((await chainedRuns(alert)).map((r) => r.chainedFrom)).toContain(wfRun.id));
    // The workflow's steps ending triggers nothing: only the run as a whole chains.
    expect((await chainedRuns(alert)).map((r) => r.chainedFrom).sort()).toEqual([run.id, wfRun.id].sort());
  });

  it("a repeated delivery of a chain, from any consumer, makes one run", async () => {
    const next = await newJob("next");
    const job = await newJob("first", { onSuccess: [next.id] });
    const run = await trigger(job);
    await waitForRun(run.id, ["succeeded"]);
    await vi.waitFor(async () => expect(await chainedRuns(next)).toHaveLength(1));

    const message: ChainMessage = {
      kind: "chain",
      shard: job.shard,
      id: `${run.id}:chain:${next.id}`,
      tenantId: job.tenantId,
      jobId: next.id,
      fromRunId: run.id,
    };
    await deliver(message);
    await deliver(message);
    const again = await shardOf(next).trigger(next.id, { chainedFrom: run.id });
    expect(again.ok).toBe(true);
    const runs = await chainedRuns(next);
    expect(runs).toHaveLength(1);
    expect(again.ok && again.value.id).toBe(runs[0]!.id);
  });

  it("a chained job paused or deleted since is not triggered, and the chain is settled all the same", async () => {
    const [paused, deleted, live] = await Promise.all([newJob("paused"), newJob("deleted"), newJob("live")]);
    const job = await newJob("first", { onSuccess: [paused.id, deleted.id, live.id] });
    expect((await api(`/v1/jobs/${paused.id}/pause`, { method: "POST" })).status).toBe(200);
    expect((await api(`/v1/jobs/${deleted.id}`, { method: "DELETE" })).status).toBe(200);

    const run = await trigger(job);
    await waitForRun(run.id, ["succeeded"]);
    await vi.waitFor(async () => expect(await chainedRuns(live)).toHaveLength(1));
    await vi.waitFor(async () => expect(await outboxChains(job)).toEqual([]));
    expect(await listRuns(paused.id)).toEqual([]);
  });

  it("refuses chains to unknown, deleted, other tenants' jobs, to itself and around a loop (400, nothing changed)", async () => {
    const [a, b, gone] = await Promise.all([newJob("a"), newJob("b"), newJob("gone")]);
    expect((await api(`/v1/jobs/${gone.id}`, { method: "DELETE" })).status).toBe(200);
    const other = await createTenant();
    const theirs = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("theirs") } }, other.api);
    const body = { schedule: FAR_CRON, target: { url: receiverPath("x") } };

    await expectRefused(
      await api("/v1/jobs", { method: "POST", json: { ...body, onSuccess: ["job_nope"] } }),
      "onSuccess.0",
      /not a job id/,
    );
    await expectRefused(
      await api("/v1/jobs", { method: "POST", json: { ...body, onFailure: [a.id, a.id] } }),
      "onFailure",
      /more than once/,
    );
    await expectRefused(await api("/v1/jobs", { method: "POST", json: { ...body, onFailure: [a.id, gone.id] } }), "onFailure.1", /no job/);
    await expectRefused(await api("/v1/jobs", { method: "POST", json: { ...body, onSuccess: [theirs.id] } }), "onSuccess.0", /no job/);
    await expectRefused(
      await other.api(`/v1/jobs/${theirs.id}`, { method: "PATCH", json: { onSuccess: [a.id] } }),
      "onSuccess.0",
      /no job/,
    );
    await expectRefused(
      await api(`/v1/jobs/${a.id}`, { method: "PATCH", json: { onSuccess: [a.id] } }),
      "onSuccess.0",
      /cannot trigger itself/,
    );

    // a → b is fine; b → a would close a loop.
    const chained = await api(`/v1/jobs/${a.id}`, { method: "PATCH", json: { onSuccess: [b.id] } });
    expect(chained.status).toBe(200);
    await expectRefused(
      await api(`/v1/jobs/${b.id}`, { method: "PATCH", json: { onFailure: [a.id] } }),
      "onFailure.0",
      new RegExp(`loop: ${b.id} → ${a.id} → ${b.id}`),
    );
    const bNow = (await (await api(`/v1/jobs/${b.id}`)).json()) as Job;
    expect(bNow.onFailure).toBeUndefined();
    expect(bNow.version).toBe(b.version);

    // null takes a chain away.
    const cleared = (await (await api(`/v1/jobs/${a.id}`, { method: "PATCH", json: { onSuccess: null } })).json()) as Job;
    expect(cleared.onSuccess).toBeUndefined();
  });
  it("a key limited to a job prefix chains only to jobs under it: 403 naming the field, nothing changed", async () => {
    const tenant = await createTenant();
    const made = await tenant.api(`/v1/tenants/${tenant.id}/keys`, {
      method: "POST",
      json: { scopes: ["read", "write"], jobPrefix: "deploy-" },
    });
    expect(made.status, await made.clone().text()).toBe(201);
    const prefixed = withKey(((await made.json()) as { apiKey: string }).apiKey);
    const job = (name: string) => ({ name, schedule: FAR_CRON, target: { url: receiverPath(`prefix-${name}`) }, breaker: false });
    const [outside, inside, own] = await Promise.all([
      createJob(job("other"), tenant.api),
      createJob(job("deploy-next"), tenant.api),
      createJob(job("deploy-own"), tenant.api),
    ]);

    const refused = await prefixed("/v1/jobs", { method: "POST", json: { ...job("deploy-new"), onFailure: [inside.id, outside.id] } });
    expect(refused.status, await refused.clone().text()).toBe(403);
    const body = (await refused.json()) as { error: { code: string; message: string; issues: Array<{ path: string }> } };
    expect(body.error).toMatchObject({ code: "insufficient_scope", issues: [{ path: "onFailure.1" }] });
    expect(body.error.message).toBe('onFailure.1: this key may only chain to jobs named "deploy-…"');
    // An id that is no job answers the same: the key learns nothing of jobs it cannot see.
    const unknown = await prefixed("/v1/jobs", {
      method: "POST",
      json: { ...job("deploy-new"), onSuccess: ["job_000000000aaaaaaaaaa"] },
    });
    expect(unknown.status).toBe(403);
    const patched = await prefixed(`/v1/jobs/${own.id}`, { method: "PATCH", json: { onSuccess: [outside.id] } });
    expect(patched.status).toBe(403);
    expect(((await patched.json()) as { error: { issues: Array<{ path: string }> } }).error.issues[0]!.path).toBe("onSuccess.0");
    const names = ((await (await tenant.api("/v1/jobs")).json()) as { items: Job[] }).items.map((j) => j.name).sort();
    expect(names).toEqual(["deploy-next", "deploy-own", "other"]);
    const ownNow = (await (await tenant.api(`/v1/jobs/${own.id}`)).json()) as Job;
    expect(ownNow).toMatchObject({ version: own.version });
    expect(ownNow.onSuccess).toBeUndefined();

    // Under the prefix it is a chain like any other; the tenant's own key chains anywhere.
    const chained = await prefixed(`/v1/jobs/${own.id}`, { method: "PATCH", json: { onSuccess: [inside.id] } });
    expect(chained.status, await chained.clone().text()).toBe(200);
    expect(await chained.json()).toMatchObject({ onSuccess: [inside.id] });
    expect((await tenant.api(`/v1/jobs/${inside.id}`, { method: "PATCH", json: { onSuccess: [outside.id] } })).status).toBe(200);
  });

  it("a chain set by a prefixed key does not fire a job renamed out of the prefix since; the tenant's own chain to it does", async () => {
    const tenant = await createTenant();
    const made = await tenant.api(`/v1/tenants/${tenant.id}/keys`, {
      method: "POST",
      json: { scopes: ["read", "write"], jobPrefix: "ci-" },
    });
    const prefixed = withKey(((await made.json()) as { apiKey: string }).apiKey);
    const job = (name: string, extra: Record<string, unknown> = {}) => ({
      name,
      schedule: FAR_CRON,
      target: { url: receiverPath(`fire-${name}`) },
      breaker: false,
      ...extra,
    });
    const target = await createJob(job("ci-target"), prefixed);
    const bySetter = await createJob(job("ci-source", { onSuccess: [target.id] }), prefixed);
    const byTenant = await createJob(job("tenant-source", { onSuccess: [target.id] }), tenant.api);
    // The tenant's own key renames the chained job out of the prefix.
    const renamed = await tenant.api(`/v1/jobs/${target.id}`, { method: "PATCH", json: { name: "deploy-target" } });
    expect(renamed.status, await renamed.clone().text()).toBe(200);

    const blocked = await tenant.api(`/v1/jobs/${bySetter.id}/trigger`, { method: "POST" });
    expect(blocked.status).toBe(202);
    const blockedRun = (await blocked.json()) as Run;
    await waitForRun(blockedRun.id, ["succeeded"]);
    const allowed = await tenant.api(`/v1/jobs/${byTenant.id}/trigger`, { method: "POST" });
    const allowedRun = (await allowed.json()) as Run;
    await waitForRun(allowedRun.id, ["succeeded"]);
    // Both chains settled; only the one the tenant's key set made a run.
    await vi.waitFor(async () => expect([...(await outboxChains(bySetter)), ...(await outboxChains(byTenant))]).toEqual([]));
    const runs = (await listRuns(target.id)).filter((r) => r.trigger === "chain");
    expect(runs.map((r) => r.chainedFrom)).toEqual([allowedRun.id]);
    // Delivered again by hand, the blocked chain still makes nothing.
    await deliver({
      kind: "chain",
      shard: bySetter.shard,
      id: `${blockedRun.id}:chain:${target.id}`,
      tenantId: tenant.id,
      jobId: target.id,
      fromRunId: blockedRun.id,
    });
    expect((await listRuns(target.id)).filter((r) => r.trigger === "chain")).toHaveLength(1);
    // The recorded prefix is the fire-time check's, not part of the job as shown.
    expect(Object.keys((await (await tenant.api(`/v1/jobs/${bySetter.id}`)).json()) as Job)).not.toContain("chainPrefixes");
  });

  it(`a loop too long for the save's check ends ${MAX_CHAIN_DEPTH} hops from the run that began it`, async () => {
    // A ring of MAX_CHAIN_DEPTH + 2 jobs: the save that closes it follows the chain only
    // MAX_CHAIN_DEPTH levels, so it is accepted, as a loop made by two racing saves would be.
    const ring: Job[] = [];
    for (let i = 0; i < MAX_CHAIN_DEPTH + 2; i++) ring.push(await newJob(`ring-${i}`));
    for (const [i, job] of ring.entries()) {
      const next = ring[(i + 1) % ring.length]!;
      const res = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { onSuccess: [next.id] } });
      expect(res.status, await res.clone().text()).toBe(200);
    }
    const first = await trigger(ring[0]!);
    await waitForRun(first.id, ["succeeded"]);
    const chained = async () => (await Promise.all(ring.map(chainedRuns))).flat();
    await vi.waitFor(async () => expect(await chained()).toHaveLength(MAX_CHAIN_DEPTH), { timeout: 90_000, interval: 500 });
    const last = (await chained()).find((r) => chainDepthOf(r.id) === MAX_CHAIN_DEPTH)!;
    expect(last.jobId).toBe(ring[MAX_CHAIN_DEPTH]!.id);
    await waitForRun(last.id, ["succeeded"]);
    // Its end triggered nothing: its shard's outbox holds no chain of it, and no run follows.
    expect(await outboxChains(ring[MAX_CHAIN_DEPTH]!)).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(await chained()).toHaveLength(MAX_CHAIN_DEPTH);
    expect(await listRuns(ring[MAX_CHAIN_DEPTH + 1]!.id)).toEqual([]);
  }, 150_000);
});
