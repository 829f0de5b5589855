import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { armFault, disarmFault, faultCounts } from "../../src/faults";
import { CreateJobSchema, type Job } from "../../src/model/job";
import { sealTarget } from "../../src/security/targets";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, createTenant, FAR_CRON, getRun, hitsOf, listRuns, maxOverlap, receiverPath, shardOf, waitForRun } from "./helpers";

/** Every attempt of a job as the shard recorded it (its clock): [started, finished]. */
async function attemptSpans(job: Job): Promise<Array<[number, number]>> {
  return runInDurableObject(shardOf(job), (_s: Shard, state) =>
    state.storage.sql
      .exec("SELECT a.started_at, a.finished_at FROM attempt_log a JOIN runs r ON r.id = a.run_id WHERE r.job_id = ?", job.id)
      .toArray()
      .map((r) => [r.started_at as number, r.finished_at as number] as [number, number]),
  );
}

/** When the tenant's gate lets the run's permit lapse (undefined: it holds none). */
async function permitExpiryOf(tenantId: string, runId: string): Promise<number | undefined> {
  const gate = env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenantId));
  return runInDurableObject(
    gate,
    (_g, state) =>
      state.storage.sql.exec("SELECT expires_at FROM permits WHERE permit LIKE ?", `${runId}#%`).toArray()[0]?.expires_at as
        | number
        | undefined,
  );
}

async function trigger(job: Job, as: typeof api = api): Promise<string> {
  const res = await as(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
  expect(res.status, await res.clone().text()).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

describe("a job's maxConcurrency", () => {
  it("keeps at most that many runs in flight; the rest wait and all of them run", async () => {
    const url = receiverPath("maxconc", "delayMs=300");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, maxConcurrency: 2 });
    const ids = [];
    for (let i = 0; i < 6; i++) ids.push(await trigger(job));
    const states = (await listRuns(job.id)).map((r) => r.state);
    expect(states.filter((s) => s === "waiting").length).toBeGreaterThanOrEqual(4);

    for (const id of ids) await waitForRun(id, ["succeeded"], 20_000);
    expect(maxOverlap(await attemptSpans(job))).toBeLessThanOrEqual(2);
    expect(await hitsOf(url)).toHaveLength(6);
  });

  it("a paused job's waiting runs are cancelled, not left waiting", async () => {
    const url = receiverPath("maxconc-pause", "delayMs=500");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, maxConcurrency: 1 });
    const first = await trigger(job);
    const second = await trigger(job);
    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(200);
    const waited = await waitForRun(second, ["cancelled"]);
    expect(waited.error).toMatch(/paused/);
    await waitForRun(first, ["succeeded", "cancelled"]);
  });

  it("can be changed and cleared by PATCH", async () => {
    const job = await createJob({
      schedule: FAR_CRON,
      target: { url: receiverPath("maxconc-patch") },
      maxConcurrency: 3,
      ratePerSecond: 2,
    });
    expect(job).toMatchObject({ maxConcurrency: 3, ratePerSecond: 2 });
    const patched = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { maxConcurrency: null, ratePerSecond: 0.5 } });
    expect(await patched.json()).toMatchObject({ ratePerSecond: 0.5 });
    const again = (await (await api(`/v1/jobs/${job.id}`)).json()) as Job;
    expect(again.maxConcurrency).toBeUndefined();
  });
});

describe("a job's ratePerSecond", () => {
  it("spaces its runs toward the target at 1/rate", async () => {
    const url = receiverPath("rate");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, ratePerSecond: 10 });
    const ids = [];
    for (let i = 0; i < 6; i++) ids.push(await trigger(job));
    for (const id of ids) await waitForRun(id, ["succeeded"], 20_000);
    const arrivals = (await hitsOf(url)).map((h) => h.receivedAt).sort((a, b) => a - b);
    expect(arrivals).toHaveLength(6);
    // Admissions are 100 ms apart; delivery jitter can only shorten the span by one delivery's delay.
    expect(arrivals.at(-1)! - arrivals[0]!).toBeGreaterThanOrEqual(400);
  });
});

describe("a tenant's maxRunsInFlight", () => {
  it("holds over all the tenant's jobs on every shard; waiting runs start as others finish, none is lost", async () => {
    const tenant = await createTenant({ maxRunsInFlight: 2 });
    const url = receiverPath("tenant-inflight", "delayMs=300");
    const jobs: Job[] = [];
    for (let i = 0; i < 4; i++) jobs.push(await createJob({ schedule: FAR_CRON, target: { url } }, tenant.api));
    expect(new Set(jobs.map((j) => j.shard)).size).toBeGreaterThan(1);

    const ids: string[] = [];
    for (const job of jobs) for (let i = 0; i < 2; i++) ids.push(await trigger(job, tenant.api));
    // Woken by the gate as capacity frees: well before the 15 s backstop re-check.
    for (const id of ids) await waitForRun(id, ["succeeded"], 12_000);

    const spans = (await Promise.all(jobs.map(attemptSpans))).flat();
    expect(spans).toHaveLength(8);
    expect(maxOverlap(spans)).toBeLessThanOrEqual(2);
    expect(await hitsOf(url)).toHaveLength(8);
    // Every permit was given back.
    const gate = env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenant.id));
    await expect.poll(() => gate.inFlight()).toBe(0);
  });

  it("a tenant without the limit is not held back by another's", async () => {
    const limited = await createTenant({ maxRunsInFlight: 1 });
    const free = await createTenant({ maxRunsInFlight: null });
    const slow = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("limited", "delayMs=1000") } }, limited.api);
    const fast = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("free") } }, free.api);
    // A trigger answers after admission: `running` was dispatched (its attempt begun), `waiting` was held back.
    const states = async (job: Job, as: typeof api, n: number) => {
      const runs = [];
      for (let i = 0; i < n; i++)
        runs.push((await (await as(`/v1/jobs/${job.id}/trigger`, { method: "POST" })).json()) as { id: string; state: string });
      return runs;
    };
    const [blocking, held] = await states(slow, limited.api, 2);
    expect([blocking!.state, held!.state]).toEqual(["running", "waiting"]);
    const others = await states(fast, free.api, 3);
    expect(others.map((r) => r.state)).toEqual(["running", "running", "running"]);
    for (const run of [blocking!, held!, ...others]) await waitForRun(run.id, ["succeeded"]);
  });
});

/** A run of a tenant limited to one run in flight, whose target answered 202: its attempt is `accepted`, its permit held; the target's completion token. */
async function acceptedUnderLimit(name: string) {
  const tenant = await createTenant({ maxRunsInFlight: 1 });
  const url = receiverPath(name, "status=202");
  const job = await createJob({ schedule: FAR_CRON, target: { url }, timeoutMs: 5_000 }, tenant.api);
  const runId = await trigger(job, tenant.api);
  const hit = await vi.waitFor(async () => {
    const [first] = await hitsOf(url);
    if (!first) throw new Error("the target has not been called yet");
    return first;
  });
  await expect.poll(async () => (await getRun(runId)).attemptLog?.[0]?.outcome).toBe("accepted");
  return { tenant, job, runId, token: hit.headers["x-edgecron-completion-token"]! };
}

describe("a long-running attempt under a tenant's maxRunsInFlight", () => {
  it("keeps its permit while it heartbeats, and gives it back when it completes", async () => {
    const { tenant, job, runId, token } = await acceptedUnderLimit("inflight-202");
    const permitExpiry = () => permitExpiryOf(tenant.id, runId);

    const beat = await api(`/v1/runs/${runId}/heartbeat`, { method: "POST", json: { token, extendMs: 3_600_000 } });
    expect(beat.status, await beat.clone().text()).toBe(200);
    expect(await permitExpiry()).toBeGreaterThan(Date.now() + 3_500_000);
    // While it runs, the tenant's other runs wait.
    const second = await trigger(job, tenant.api);
    expect((await getRun(second)).state).toBe("waiting");

    const done = await api(`/v1/runs/${runId}/complete`, { method: "POST", json: { token, ok: true } });
    expect(done.status, await done.clone().text()).toBe(200);
    await expect.poll(permitExpiry).toBeUndefined();
    await waitForRun(second, ["running", "succeeded"]);
  });
});

describe("a permit renewal that fails or is lost", () => {
  it("is retried, and a permit that lapsed meanwhile is taken again by the lease's own renewal: the limit holds", async () => {
    const { tenant, job, runId, token } = await acceptedUnderLimit("renewal-lost");
    const permitExpiry = () => permitExpiryOf(tenant.id, runId);

    // A heartbeat moves the attempt's lease an hour on; its permit's renewal is refused by the gate...
    const refusals = faultCounts.get("shard.permitRenew") ?? 0;
    armFault("shard.permitRenew", Infinity, job.shard);
    const beat = await api(`/v1/runs/${runId}/heartbeat`, { method: "POST", json: { token, extendMs: 3_600_000 } });
    expect(beat.status, await beat.clone().text()).toBe(200);
    await vi.waitFor(() => expect(faultCounts.get("shard.permitRenew")).toBeGreaterThan(refusals));
    // The permit's own lease runs out at the gate meanwhile, which hands its place on.
    const gate = env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenant.id));
    await runInDurableObject(gate, async (g, state) => {
      state.storage.sql.exec("UPDATE permits SET expires_at = ? WHERE permit LIKE ?", Date.now() - 1, `${runId}#%`);
      // Written behind the gate's back: what it keeps in memory of its permits is read again.
      (g as unknown as { permits: { forget(): void } }).permits.forget();
      await state.storage.setAlarm(Date.now() + 3_600_000); // for runDurableObjectAlarm to run it now
    });
    await runDurableObjectAlarm(gate);
    expect(await permitExpiry()).toBeUndefined();
    // The renewal, kept in memory for the next try, is lost with it: the shard restarts.
    await evictDurableObject(shardOf(job));
    disarmFault("shard.permitRenew", job.shard);

    // The attempt's lease row comes due (made due here): the lease moved on, so the permit is
    // renewed from storage, and the gate takes it again.
    await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("UPDATE leases SET due_at = ?1 WHERE due_at = (SELECT MIN(due_at) FROM leases)", Date.now() - 1),
    );
    await runDurableObjectAlarm(shardOf(job));
    await expect.poll(permitExpiry).toBeGreaterThan(Date.now() + 3_000_000);
    // The attempt still runs: the tenant's other runs wait.
    const second = await trigger(job, tenant.api);
    expect((await getRun(second)).state).toBe("waiting");
    expect(await api(`/v1/runs/${runId}/complete`, { method: "POST", json: { token, ok: true } }).then((r) => r.status)).toBe(200);
    await waitForRun(second, ["running", "succeeded"]);
  });
});

describe("a workflow run under a tenant's maxRunsInFlight", () => {
  it("holds one permit while its steps run, each step's claim extending it by that step's lease", async () => {
    const tenant = await createTenant({ maxRunsInFlight: 1 });
    const slow = receiverPath("wf-permit-slow", "delayMs=1500");
    // The job's own timeout (what the admission leased the permit for) is short; step b's is long.
    const job = await createJob(
      {
        schedule: FAR_CRON,
        timeoutMs: 1_000,
        steps: [
          { id: "a", target: { url: receiverPath("wf-permit-a") } },
          { id: "b", after: ["a"], target: { url: slow }, timeoutMs: 600_000 },
        ],
      },
      tenant.api,
    );
    const runId = await trigger(job, tenant.api);
    const permitExpiry = () => permitExpiryOf(tenant.id, runId);

    await vi.waitFor(async () => expect((await hitsOf(slow)).length).toBe(1));
    // b is claimed: the permit now lasts b's 600 s, not the admission's 1 s job timeout.
    await expect.poll(permitExpiry).toBeGreaterThan(Date.now() + 550_000);
    expect((await getRun(await trigger(job, tenant.api))).state).toBe("waiting");

    await waitForRun(runId, ["succeeded"]);
    await expect.poll(permitExpiry).toBeUndefined();
  });
});

describe("admission under interleaving and backlog", () => {
  /** Two jobs of one tenant on one shard of the test's choosing, handed to it as the API would. */
  async function twoJobsOnOneShard(limit: number | null, spec: Record<string, unknown> = {}) {
    const tenant = await createTenant({ maxRunsInFlight: limit });
    const shard = `shard-t${crypto.randomUUID().slice(0, 8)}`;
    const stub = env.SHARD.get(env.SHARD.idFromName(shard));
    const url = receiverPath("admission", "delayMs=1000");
    const { target, steps: _steps, ...rest } = CreateJobSchema.parse({ schedule: FAR_CRON, target: { url }, ...spec });
    const defs = await Promise.all(
      ["a", "b"].map(async (suffix) => {
        const id = `job_${Date.now().toString(36).padStart(9, "0")}${suffix}${crypto.randomUUID().replace(/-/g, "").slice(0, 9)}`;
        return {
          id,
          tenantId: tenant.id,
          version: 1,
          spec: { ...rest, target: await sealTarget(env.ENCRYPTION_KEYS, target!, id) },
          paused: false,
          deleted: false,
          createdAt: Date.now(),
        };
      }),
    );
    await stub.applyJobs(defs, [{ id: tenant.id, version: 1, signingGeneration: 1, maxRunsInFlight: limit }]);
    return { tenant, shard, stub, jobs: defs.map((d) => d.id) };
  }

  it("two admissions at once grant one permit per run, and the limit holds", async () => {
    const { tenant, shard, stub, jobs } = await twoJobsOnOneShard(1);
    // Two waiting runs, made by hand so that nothing has admitted them yet.
    await runInDurableObject(stub, (_s: Shard, state) => {
      for (const [i, jobId] of jobs.entries()) {
        state.storage.sql.exec(
          "INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at) VALUES (?, ?, 1, 'manual', ?, 'waiting', 1, 1, ?, ?)",
          `run_${jobs[i]!.slice(4)}_mx${i}`,
          jobId,
          Date.now(),
          Date.now() - 1,
          Date.now(),
        );
      }
    });
    // Called within one invocation, each runs until its gate call before the next starts: all
    // three read the same waiting runs, as interleaved requests would.
    await runInDurableObject(stub, (instance: Shard) =>
      Promise.all([instance.admitWaiting(), instance.admitWaiting(), instance.admitWaiting()]),
    );
    const inFlight = await runInDurableObject(stub, (_s: Shard, state) =>
      state.storage.sql
        .exec("SELECT permit FROM runs WHERE state IN ('queued', 'running')")
        .toArray()
        .map((r) => r.permit as string),
    );
    const gate = env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenant.id));
    const held = await runInDurableObject(gate, (_g, state) =>
      state.storage.sql
        .exec("SELECT permit FROM permits")
        .toArray()
        .map((r) => r.permit as string),
    );
    // The run in flight (its target takes a second) holds its permit, and no other run is in flight.
    expect(inFlight).toHaveLength(1);
    expect(held).toEqual(inFlight);
    expect(shard).toMatch(/^shard-t/);
  });

  it("one job's deferred backlog does not keep another job's runs from being admitted", async () => {
    const { stub, jobs } = await twoJobsOnOneShard(null, { maxConcurrency: 1 });
    const [a, b] = jobs as [string, string];
    const now = Date.now();
    // 2,001 runs of job a, all due and all older than b's one run: more than one admission pass takes.
    await runInDurableObject(stub, (_s: Shard, state) => {
      for (let i = 0; i < 2_001; i++) {
        state.storage.sql.exec(
          "INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at) VALUES (?, ?, 1, 'backfill', ?, 'waiting', 1, 1, ?, ?)",
          `run_${a.slice(4)}_${i.toString(36)}`,
          a,
          now - 10_000 + i,
          now - 10_000 + i,
          now,
        );
      }
      state.storage.sql.exec(
        "INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at) VALUES (?, ?, 1, 'manual', ?, 'waiting', 1, 1, ?, ?)",
        `run_${b.slice(4)}_mb`,
        b,
        now,
        now,
        now,
      );
    });
    await stub.admitWaiting();
    await stub.admitWaiting();
    const stateOfB = await runInDurableObject(
      stub,
      (_s: Shard, state) => state.storage.sql.exec("SELECT state FROM runs WHERE job_id = ?", b).one().state,
    );
    expect(stateOfB).not.toBe("waiting");
    const admittedOfA = await runInDurableObject(
      stub,
      (_s: Shard, state) => state.storage.sql.exec("SELECT COUNT(*) AS n FROM runs WHERE job_id = ? AND state != 'waiting'", a).one().n,
    );
    expect(admittedOfA).toBe(1); // its maxConcurrency
  });
});
