import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { armFault, disarmFault } from "../../src/faults";
import type { TenantGate } from "../../src/gate/tenant-gate";
import type { Job } from "../../src/model/job";
import type { Shard } from "../../src/shard/shard";
import {
  type api,
  createJob,
  createTenant,
  FAR_CRON,
  fireInFlight,
  hitsOf,
  listRuns,
  makeRunDue,
  receiverPath,
  runAlarmNow,
  shardOf,
  waitForRun,
} from "./helpers";

/** A test wrote the gate's permits behind its back: what the gate keeps in memory of them is read again. */
const forgetPermits = (gate: unknown) => (gate as { permits: { forget(): void } }).permits.forget();

/** How many of the job's runs are in each state, as its shard holds them. */
async function statesOf(job: Job): Promise<Record<string, number>> {
  return runInDurableObject(shardOf(job), (_s: Shard, state) =>
    Object.fromEntries(
      state.storage.sql
        .exec("SELECT state, COUNT(*) AS n FROM runs WHERE job_id = ? GROUP BY state", job.id)
        .toArray()
        .map((r) => [r.state as string, r.n as number]),
    ),
  );
}

/** Retries that come within the test's time. */
const QUICK_RETRY = { maxAttempts: 3, backoff: { initialMs: 100, maxMs: 200 } };

const inFlight = (s: Record<string, number>) => (s.queued ?? 0) + (s.running ?? 0);

/**
 * Six runs of `job`, whose tenant or group lets two run at once: two admitted and dispatched,
 * their dispatches lost with the shard's memory (the queue refuses every send meanwhile), their
 * permits' leases run out at the gate during the outage, which gives their places to two of the
 * waiting runs; then the first two's attempt leases end. Checks that the limit held throughout
 * and that every run succeeded with its target called once.
 */
async function crashWithPermitsLapsed(job: Job, as: typeof api, gate: DurableObjectStub<TenantGate>) {
  const url = job.target!.url;
  armFault("shard.queueSend", Infinity, job.shard);
  const ids: string[] = [];
  let first: string[] = [];
  try {
    for (let i = 0; i < 6; i++) {
      const res = await as(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
      expect(res.status, await res.clone().text()).toBe(202);
      ids.push(((await res.json()) as { id: string }).id);
    }
    expect(await statesOf(job)).toEqual({ running: 2, waiting: 4 });
    first = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql
        .exec("SELECT id FROM runs WHERE job_id = ? AND state = 'running'", job.id)
        .toArray()
        .map((r) => r.id as string),
    );

    // The crash: the shard loses the dispatches it held, and during the outage the two
    // permits' leases end at the gate, which frees their places and wakes the shard.
    await evictDurableObject(shardOf(job));
    await runInDurableObject(gate, async (g, state) => {
      state.storage.sql.exec("UPDATE permits SET expires_at = ?", Date.now() - 1);
      forgetPermits(g); // written behind the gate's back
      state.storage.sql.exec("UPDATE group_permits SET expires_at = ?", Date.now() - 1);
      await state.storage.setAlarm(Date.now() + 3_600_000); // for runDurableObjectAlarm to run it now
    });
    await runDurableObjectAlarm(gate);
    // Two waiting runs are admitted in the places freed: the first two are still running as the shard sees them.
    await vi.waitFor(async () => expect(await statesOf(job)).toEqual({ running: 4, waiting: 2 }), { timeout: 5_000, interval: 50 });

    // The first two runs' attempt leases end: their dispatches would go out again, but their
    // places were given away, so their attempts end as lost ones and their retries wait for a place.
    for (const id of first) await makeRunDue(job, id);
    await vi.waitFor(
      async () => {
        const rows = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
          state.storage.sql.exec("SELECT state, redispatches FROM runs WHERE id IN (?, ?)", first[0], first[1]).toArray(),
        );
        // Settled: sent again (as before the fix) or ended.
        if (!rows.every((r) => r.state !== "running" || Number(r.redispatches) > 0)) throw new Error("not settled yet");
      },
      { timeout: 5_000, interval: 50 },
    );
    const after = await statesOf(job);
    expect(inFlight(after)).toBeLessThanOrEqual(2);
    expect(after.running).toBe(2);
    // The lost attempts are kept, ended timed out, never sent again under their fence.
    for (const id of first) {
      const lost = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
        state.storage.sql.exec("SELECT outcome FROM attempt_log WHERE run_id = ? AND fence = 1", id).one(),
      );
      expect(lost.outcome).toBe("timed_out");
    }
  } finally {
    disarmFault("shard.queueSend", job.shard);
  }

  // The queue takes sends again: every run succeeds, the limit holding all the way.
  const samples: number[] = [];
  await runAlarmNow(job);
  await vi.waitFor(
    async () => {
      const states = await statesOf(job);
      samples.push(inFlight(states));
      expect(states).toEqual({ succeeded: 6 });
    },
    { timeout: 30_000, interval: 100 },
  );
  expect(Math.max(...samples)).toBeLessThanOrEqual(2);
  for (const id of ids) await waitForRun(id, ["succeeded"]);
  // The first two took a second attempt, numbered after the lost one; the others one.
  for (const id of ids) {
    const numbers = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql
        .exec("SELECT attempt FROM attempt_log WHERE run_id = ? ORDER BY fence", id)
        .toArray()
        .map((r) => r.attempt as number),
    );
    expect(numbers).toEqual(first.includes(id) ? [1, 2] : [1]);
  }
  // No dispatch of the lost attempts ever left the shard: each run's target was called once, by its last attempt.
  const hits = await hitsOf(url);
  expect(hits.map((h) => h.headers["idempotency-key"]).sort()).toEqual([...ids].sort());
}

describe("limits across a crash that lost the dispatches of runs in flight and let their permits lapse", () => {
  it("a tenant's maxRunsInFlight holds: a resend whose place was given away ends as a lost attempt, and its retry waits for a permit", async () => {
    const tenant = await createTenant({ maxRunsInFlight: 2 });
    const job = await createJob(
      { schedule: FAR_CRON, target: { url: receiverPath("permits-after-crash", "delayMs=200") }, retry: QUICK_RETRY },
      tenant.api,
    );
    const gate = env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenant.id));
    await crashWithPermitsLapsed(job, tenant.api, gate);
    await expect.poll(() => gate.inFlight()).toBe(0);
  });

  it("a flow-control group's parallelism holds the same way", async () => {
    const tenant = await createTenant({ maxRunsInFlight: null });
    const flowControl = { key: `g-${crypto.randomUUID()}`, parallelism: 2 };
    const url = receiverPath("group-after-crash", "delayMs=200");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, flowControl, retry: QUICK_RETRY }, tenant.api);
    const gate = env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenant.id));
    await crashWithPermitsLapsed(job, tenant.api, gate);
    await expect.poll(async () => (await gate.groupFigures([flowControl.key]))[flowControl.key]?.inFlight).toBe(0);
  });

  it("a resend whose place is still free is granted its permit again and goes out", async () => {
    const tenant = await createTenant({ maxRunsInFlight: 2 });
    const url = receiverPath("permit-free-after-crash");
    const job = await createJob({ schedule: FAR_CRON, target: { url } }, tenant.api);
    const gate = env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenant.id));
    await fireInFlight(job);
    const [run] = await listRuns(job.id);
    await runInDurableObject(gate, (g, state) => {
      state.storage.sql.exec("DELETE FROM permits");
      forgetPermits(g); // written behind the gate's back
    });
    expect(await gate.inFlight()).toBe(0);
    await makeRunDue(job, run!.id);
    await waitForRun(run!.id, ["succeeded"]);
    // The same attempt, sent again under its fence: nothing was held back.
    expect(await hitsOf(url)).toHaveLength(1);
    const row = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT attempt, fence, redispatches FROM runs WHERE id = ?", run!.id).one(),
    );
    expect(row).toMatchObject({ attempt: 1, fence: 1, redispatches: 1 });
  });
});
