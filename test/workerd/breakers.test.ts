import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { FAILURES_TO_OPEN } from "../../src/gate/breaker";
import type { TenantGate } from "../../src/gate/tenant-gate";
import { stepRunId } from "../../src/model/ids";
import type { Job } from "../../src/model/job";
import { createJob, createTenant, FAR_CRON, fireNow, getRun, hitsOf, listRuns, makeRunDue, receiverPath } from "./helpers";

type Tenant = Awaited<ReturnType<typeof createTenant>>;

interface BreakerView {
  origin: string;
  state: string;
  consecutiveFailures: number;
  retryAt: string | null;
  heldRuns: number;
}

async function breakersOf(tenant: Tenant): Promise<BreakerView[]> {
  const res = await tenant.api("/v1/breakers");
  expect(res.status).toBe(200);
  return ((await res.json()) as { items: BreakerView[] }).items;
}

/** Fires the job once and waits until that run is in one of `states`. */
async function fireAndWait(job: Job, states: string[]): Promise<{ id: string; state: string }> {
  const due = await fireNow(job);
  return vi.waitFor(
    async () => {
      const run = (await listRuns(job.id)).find((r) => Date.parse(r.scheduledAt) === due);
      if (!run || !states.includes(run.state)) throw new Error(`run at ${due}: ${run?.state ?? "none yet"}`);
      return run;
    },
    { timeout: 15_000, interval: 50 },
  );
}

/** The breaker's cooldown, over now (its gate's storage, as time passing would leave it). */
async function coolDown(tenant: Tenant): Promise<void> {
  await runInDurableObject(env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenant.id)), (_g: TenantGate, state) => {
    state.storage.sql.exec("UPDATE breakers SET state = json_set(state, '$.retryAt', ?)", Date.now() - 1);
  });
}

const FINAL = ["succeeded", "failed", "dead", "cancelled"];
/** Quick retries, no jitter: a job's own backoff is well under the breaker's 30 s cooldown. */
const quick = (maxAttempts: number) => ({ maxAttempts, jitter: "none", backoff: { initialMs: 200, maxMs: 400 } });

/**
 * Waits until the run ends, or the breaker holds it (`waiting` for it: a run of a tenant with a
 * runs-in-flight limit is `waiting` for a moment between attempts, for its admission, too).
 */
async function settled(runId: string, holdEnds = true): Promise<Awaited<ReturnType<typeof getRun>>> {
  return vi.waitFor(
    async () => {
      const run = await getRun(runId);
      const held = run.state === "waiting" && /^circuit breaker/.test(run.error ?? "");
      if (!FINAL.includes(run.state) && !(holdEnds && held)) throw new Error(`run ${runId}: ${run.state}`);
      return run;
    },
    { timeout: 20_000, interval: 50 },
  );
}

/** Fires the job once and returns its run's id. */
async function fire(job: Job): Promise<string> {
  const due = await fireNow(job);
  return vi.waitFor(
    async () => {
      const run = (await listRuns(job.id)).find((r) => Date.parse(r.scheduledAt) === due);
      if (!run) throw new Error(`run at ${due}: none yet`);
      return run.id;
    },
    { timeout: 15_000, interval: 50 },
  );
}

/** The tenant's gate. */
const gateOf = (tenant: Tenant) => env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenant.id));

/** Opens the tenant's breaker of the receiver's origin: two jobs whose endpoints answer 503, three runs each. */
async function openBreaker(tenant: Tenant): Promise<void> {
  const openers = await Promise.all(
    ["open-a", "open-b"].map((name) =>
      createJob({ schedule: FAR_CRON, target: { url: receiverPath(name, "status=503") }, retry: quick(1), breaker: true }, tenant.api),
    ),
  );
  for (let i = 0; i < 3; i++) for (const job of openers) await settled(await fire(job));
  await vi.waitFor(async () => expect(await breakersOf(tenant)).toMatchObject([{ state: "open" }]), { timeout: 5_000, interval: 50 });
}

describe("circuit breakers", () => {
  it("an origin down for several jobs (503s): it opens and holds their runs unspent; after the cooldown one probe goes, any job's answer closes it", async () => {
    const tenant = await createTenant();
    // Three endpoints of one origin all answer 503: the origin is down, as a gateway says it.
    const urls = ["down-a", "down-b", "down-c"].map((name) => receiverPath(name, "status=503"));
    const origin = new URL(urls[0]!).origin;
    const jobs = await Promise.all(
      urls.map((url) => createJob({ schedule: FAR_CRON, target: { url }, retry: quick(10), breaker: true }, tenant.api)),
    );
    const runIds = await Promise.all(jobs.map(fire));
    // Each run fails its attempts until five failures of several jobs open the breaker; then held.
    const held = await Promise.all(runIds.map((id) => settled(id)));
    expect(held.map((r) => r.state)).toEqual(["waiting", "waiting", "waiting"]);
    for (const run of held) {
      expect(run.error).toMatch(/^circuit breaker open for http:\/\/127\.0\.0\.1:\d+: waiting until /);
      // Attempts unspent: far from their 10.
      expect(run.attemptLog!.length).toBeLessThan(5);
    }
    const [breaker] = await breakersOf(tenant);
    expect(breaker).toMatchObject({ origin, state: "open" });
    const calls = (await Promise.all(urls.map(hitsOf))).map((h) => h.length);
    expect(calls.reduce((a, b) => a + b)).toBeGreaterThanOrEqual(FAILURES_TO_OPEN);

    // The cooldown over, another job of the origin (it answers 404: the origin is up) is the
    // probe: its answer closes the breaker; the held runs are not called for it.
    await coolDown(tenant);
    const missing = await createJob(
      { schedule: FAR_CRON, target: { url: receiverPath("down-404", "status=404") }, retry: quick(3), breaker: true },
      tenant.api,
    );
    expect((await settled(await fire(missing), false)).state).toBe("failed");
    await vi.waitFor(async () => expect(await breakersOf(tenant)).toEqual([]), { timeout: 5_000, interval: 50 });
    expect((await Promise.all(urls.map(hitsOf))).map((h) => h.length)).toEqual(calls);
  });

  it("one endpoint failing always (500) among flaky, missing and slow ones: every job follows its own retry policy, none is held", async () => {
    const tenant = await createTenant();
    const broken = await createJob(
      { schedule: FAR_CRON, target: { url: receiverPath("mix-broken", "status=500") }, retry: quick(5), breaker: true },
      tenant.api,
    );
    // Alone first: five failures in a row of one endpoint, whatever they are, hold nobody.
    const first = await settled(await fire(broken));
    expect([first.state, first.attemptLog!.length]).toEqual(["dead", 5]);

    const flakyUrl = receiverPath("mix-flaky", "status=503,503,200");
    const flaky = await createJob({ schedule: FAR_CRON, target: { url: flakyUrl }, retry: quick(5), breaker: true }, tenant.api);
    const missing = await createJob(
      { schedule: FAR_CRON, target: { url: receiverPath("mix-404", "status=404") }, retry: quick(5), breaker: true },
      tenant.api,
    );
    // Slow past its timeout once, then quick.
    const slowUrl = receiverPath("mix-slow", "delayMs=2500,0");
    const slow = await createJob(
      { schedule: FAR_CRON, target: { url: slowUrl }, timeoutMs: 1_000, retry: quick(3), breaker: true },
      tenant.api,
    );
    const jobs = [broken, flaky, missing, slow];
    const runIds = [];
    for (const job of jobs) runIds.push(await fire(job));
    const runs = await Promise.all(runIds.map((id) => settled(id)));
    expect(runs.map((r) => [r.state, r.attemptLog!.length])).toEqual([
      ["dead", 5],
      ["succeeded", 3],
      ["failed", 1],
      ["succeeded", 2],
    ]);
    // No attempt waited for the breaker, which never opened.
    for (const run of runs) expect(run.error ?? "").not.toMatch(/circuit breaker/);
    expect((await breakersOf(tenant)).filter((b) => b.state !== "closed")).toEqual([]);
    expect((await hitsOf(flakyUrl)).length).toBe(3);
    expect((await hitsOf(slowUrl)).length).toBe(2);
  });

  it("a job that opted out is neither held nor counted; another tenant's breaker is its own", async () => {
    const tenant = await createTenant();
    const other = await createTenant();
    const url = receiverPath("breaker-optout", "status=503");
    const openers = await Promise.all(
      ["optout-a", "optout-b"].map((name) =>
        createJob({ schedule: FAR_CRON, target: { url: receiverPath(name, "status=503") }, retry: quick(1), breaker: true }, tenant.api),
      ),
    );
    for (let i = 0; i < 3; i++) for (const job of openers) await settled(await fire(job));
    await vi.waitFor(async () => expect(await breakersOf(tenant)).toMatchObject([{ state: "open" }]), { timeout: 5_000, interval: 50 });

    const optedOut = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 1 }, breaker: false }, tenant.api);
    expect((await fireAndWait(optedOut, ["dead", "waiting"])).state).toBe("dead");
    const elsewhere = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 1 }, breaker: true }, other.api);
    expect((await fireAndWait(elsewhere, ["dead", "waiting"])).state).toBe("dead");
    expect(await breakersOf(other)).toMatchObject([{ state: "closed", consecutiveFailures: 1 }]);
  });

  it("4xx answers say nothing about the origin's health: they never open it", async () => {
    const tenant = await createTenant();
    const url = receiverPath("breaker-4xx", "status=404");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 1 }, breaker: true }, tenant.api);
    for (let i = 0; i < 6; i++) await fireAndWait(job, ["failed"]);
    expect(await breakersOf(tenant)).toEqual([]);
  });

  it("a workflow's step held by it goes on under its run's permit: it asks its tenant's gate for none of its own", async () => {
    // One run in flight at most: a second permit for the step would never be granted.
    const tenant = await createTenant({ maxRunsInFlight: 1 });
    await openBreaker(tenant);
    const url = receiverPath("held-step", "delayMs=1500");
    const flow = await createJob({ schedule: FAR_CRON, steps: [{ id: "a", target: { url } }], retry: quick(2), breaker: true }, tenant.api);
    const runId = await fire(flow);
    const step = stepRunId(runId, "a");
    await vi.waitFor(
      async () =>
        expect((await getRun(runId)).steps![0]).toMatchObject({ state: "waiting", error: expect.stringMatching(/^circuit breaker/) }),
      {
        timeout: 15_000,
        interval: 50,
      },
    );
    expect(await gateOf(tenant).inFlight()).toBe(1); // the workflow run's

    // The cooldown over and the step's wait ended, it is the probe: it runs, still under that one permit.
    await coolDown(tenant);
    await makeRunDue(flow, step);
    await vi.waitFor(async () => expect(await hitsOf(url)).toHaveLength(1), { timeout: 15_000, interval: 50 });
    expect((await getRun(runId)).steps![0]!.state).toBe("running");
    expect(await gateOf(tenant).inFlight()).toBe(1);
    await vi.waitFor(async () => expect((await getRun(runId)).state).toBe("succeeded"), { timeout: 15_000, interval: 50 });
  });

  it("an origin down past the longest hold: a run it would hold ends dead, uncalled, saying why; the probes still go", async () => {
    const tenant = await createTenant();
    await openBreaker(tenant);
    // The outage began 25 hours ago (the gate's storage, as time passing would leave it).
    await runInDurableObject(gateOf(tenant), (_g: TenantGate, state) => {
      state.storage.sql.exec("UPDATE breakers SET state = json_set(state, '$.downSince', ?)", Date.now() - 25 * 3_600_000);
    });
    const url = receiverPath("held-too-long");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, retry: quick(5), breaker: true }, tenant.api);
    const run = await settled(await fire(job), false);
    expect(run.state).toBe("dead");
    expect(run.error).toMatch(/^circuit breaker open for http:\/\/127\.0\.0\.1:\d+ since \d{4}-.* over 24 h: not called/);
    expect(run.attemptLog).toEqual([]);
    expect(await hitsOf(url)).toHaveLength(0);

    // Its cooldown over, the next run is the probe: the origin answers, the breaker closes.
    await coolDown(tenant);
    expect((await settled(await fire(job), false)).state).toBe("succeeded");
    await vi.waitFor(async () => expect(await breakersOf(tenant)).toEqual([]), { timeout: 5_000, interval: 50 });
  });
});
