import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import type { TenantGate } from "../../src/gate/tenant-gate";
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

describe("circuit breakers", () => {
  it("open after 5 failures in a row: runs wait unspent; after the cooldown one probe goes, its success closes it", async () => {
    const tenant = await createTenant();
    // The target fails five times, then answers.
    const url = receiverPath("breaker", "status=500,500,500,500,500,200");
    const origin = new URL(url).origin;
    const job = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 1 }, breaker: true }, tenant.api);
    for (let i = 0; i < 5; i++) await fireAndWait(job, ["dead"]);
    await vi.waitFor(async () => expect(await breakersOf(tenant)).toMatchObject([{ origin, state: "open", consecutiveFailures: 5 }]), {
      timeout: 5_000,
      interval: 50,
    });

    // Held before it is claimed: waiting, the reason shown, no attempt spent, the target not called.
    const held = await fireAndWait(job, ["waiting"]);
    expect((await getRun(held.id)).error).toMatch(/^circuit breaker open for http:\/\/127\.0\.0\.1:\d+: waiting until /);
    expect((await getRun(held.id)).attemptLog).toEqual([]);
    expect(await hitsOf(url)).toHaveLength(5);
    expect(await breakersOf(tenant)).toMatchObject([{ state: "open", heldRuns: 1 }]);

    // The cooldown is over: the held run is the probe, the target answers, the breaker closes.
    await coolDown(tenant);
    await makeRunDue(job, held.id);
    await vi.waitFor(async () => expect((await getRun(held.id)).state).toBe("succeeded"), { timeout: 15_000, interval: 50 });
    expect((await getRun(held.id)).error).toBeNull();
    await vi.waitFor(async () => expect(await breakersOf(tenant)).toEqual([]), { timeout: 5_000, interval: 50 });
  });

  it("a job that opted out is neither held nor counted; another tenant's breaker is its own", async () => {
    const tenant = await createTenant();
    const other = await createTenant();
    const url = receiverPath("breaker-optout", "status=500");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 1 }, breaker: true }, tenant.api);
    for (let i = 0; i < 5; i++) await fireAndWait(job, ["dead"]);
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
});
