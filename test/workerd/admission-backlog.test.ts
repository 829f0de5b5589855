import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { armFault, disarmFault } from "../../src/faults";
import { CreateJobSchema } from "../../src/model/job";
import type { ShardCost } from "../../src/protocol/shard-rpc";
import { sealTarget } from "../../src/security/targets";
import type { Dispatcher } from "../../src/shard/dispatch";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, createTenant, FAR_CRON, getRun, hitsOf, receiverPath, shardOf } from "./helpers";

/**
 * A tenant's backlog over its maxRunsInFlight (docs/architecture.md, invariant 9): runs its gate
 * refuses are parked, not due, and a freed permit costs the shard rows for the run it starts,
 * not for every run waiting. Targets answer 202, so each run holds its permit until the test
 * completes it: what is in flight, and when a place frees, is the test's to say.
 */

const MINUTE = 60_000;

/** Rows read by everything but the test's own readings of the meter (`metrics` counts the runs by state). */
const rowsRead = (cost: ShardCost) =>
  Object.entries(cost.byOperation).reduce((n, [operation, o]) => (operation === "metrics" ? n : n + o.rowsRead), 0);
const alarms = (cost: ShardCost) => cost.byOperation.alarm?.calls ?? 0;
const costOf = async (stub: DurableObjectStub<Shard>) => (await stub.metrics(3_600_000)).cost;

/** A job of a new tenant with `limit` runs in flight, every minute, made 30 days ago, on a shard of the test's own. */
async function limitedJob(limit: number, name: string, spec: Record<string, unknown> = {}) {
  const tenant = await createTenant({ maxRunsInFlight: limit });
  const stub = env.SHARD.get(env.SHARD.idFromName(`shard-${800_000 + Math.floor(Math.random() * 99_999)}`));
  const url = receiverPath(name, "status=202");
  const job = await jobOf(tenant.id, url, spec);
  await stub.applyJobs([job], [{ id: tenant.id, version: 1, signingGeneration: 1, maxRunsInFlight: limit }]);
  return { tenant, stub, url, job };
}

async function jobOf(tenantId: string, url: string, spec: Record<string, unknown> = {}) {
  const {
    target,
    steps: _steps,
    ...rest
  } = CreateJobSchema.parse({ schedule: { cron: "* * * * *" }, target: { url }, timeoutMs: 900_000, ...spec });
  const id = `job_${Date.now().toString(36).padStart(9, "0")}${crypto.randomUUID().replace(/-/g, "").slice(0, 10)}`;
  return {
    id,
    tenantId,
    version: 1,
    spec: { ...rest, target: await sealTarget(env.ENCRYPTION_KEYS, target!, id) },
    paused: false,
    deleted: false,
    createdAt: Date.now() - 30 * 24 * 60 * MINUTE,
  };
}

/** Backfills `count` fires of the job, a minute apart, ending `endAgo` minutes ago, 1,000 a call. */
async function backfill(stub: DurableObjectStub<Shard>, jobId: string, count: number, endAgoMinutes: number): Promise<string[]> {
  const ids: string[] = [];
  const end = Math.floor(Date.now() / MINUTE) * MINUTE - endAgoMinutes * MINUTE;
  for (let made = 0; made < count; made += 1_000) {
    const n = Math.min(1_000, count - made);
    const to = end - made * MINUTE;
    const answer = await stub.backfill(jobId, to - (n - 1) * MINUTE, to);
    if (!answer.ok) throw new Error(answer.refusal);
    expect(answer.value.created).toHaveLength(n);
    ids.push(...answer.value.created);
  }
  return ids;
}

/** The runs whose target has been called (from its `from`th call) and not yet completed by this test: their tokens. */
async function accepted(url: string, done: Set<string>, from = 0): Promise<Array<{ runId: string; token: string }>> {
  return (await hitsOf(url))
    .slice(from)
    .map((h) => ({ runId: h.headers["x-edgecron-run-id"]!, token: h.headers["x-edgecron-completion-token"]! }))
    .filter((h) => !done.has(h.runId));
}

/** Completes a run's accepted attempt through the API, as its target would (its 202 may not have reached the shard yet). */
async function completed(runId: string, token: string): Promise<void> {
  await vi.waitFor(
    async () => {
      const res = await api(`/v1/runs/${runId}/complete`, { method: "POST", json: { token, ok: true } });
      expect(res.status, await res.text()).toBe(200);
    },
    { interval: 50 },
  );
}

const stateOf = (stub: DurableObjectStub<Shard>, runId: string) =>
  runInDurableObject(
    stub,
    (_s: Shard, state) => state.storage.sql.exec("SELECT state FROM runs WHERE id = ?", runId).one().state as string,
  );

describe("a backlog over a tenant's maxRunsInFlight", () => {
  it("20,000 runs waiting for 10 places: no alarm reads them while no place frees, and a freed place costs rows per run admitted", async () => {
    const { stub, url, job } = await limitedJob(10, "backlog-20k");
    await backfill(stub, job.id, 20_000, 60);
    // The first 10 are admitted and called; they hold their places (202) until completed here.
    await vi.waitFor(async () => expect(await accepted(url, new Set())).toHaveLength(10), { timeout: 20_000, interval: 200 });

    // Once the backlog has been looked at, no alarm is due for it: the shard sleeps.
    await vi.waitFor(
      async () => {
        await runDurableObjectAlarm(stub);
        const at = await runInDurableObject(stub, (_s: Shard, state) => state.storage.getAlarm());
        expect(at === null || at > Date.now() + 5_000, `alarm at ${at}, now ${Date.now()}`).toBe(true);
      },
      { timeout: 20_000, interval: 200 },
    );
    // An alarm run now (none of the 10 finished) admits nothing and reads next to nothing.
    const idle = await costOf(stub);
    await runInDurableObject(stub, (_s: Shard, state) => state.storage.setAlarm(Date.now()));
    await runDurableObjectAlarm(stub);
    const afterIdle = await costOf(stub);
    const idleRows = rowsRead(afterIdle) - rowsRead(idle);
    console.log(`an alarm with 20,000 runs parked and no place free: ${idleRows} rows read`);
    // A few dozen rows whatever the backlog (the alarm's own reads, which do not grow with it);
    // before runs were parked it read every waiting run, 22,401 rows here.
    expect(idleRows).toBeLessThanOrEqual(100);
    expect(await accepted(url, new Set())).toHaveLength(10);

    // Drain 100 runs: each completed run frees a place, its gate offers it, the oldest parked run takes it.
    const done = new Set<string>();
    const before = await costOf(stub);
    for (let round = 0; round < 10; round++) {
      const running = await vi.waitFor(
        async () => {
          const list = await accepted(url, done);
          expect(list).toHaveLength(10);
          return list;
        },
        { timeout: 20_000, interval: 100 },
      );
      for (const { runId, token } of running) {
        // The target was called; its 202 may not have reached the shard yet.
        await completed(runId, token);
        done.add(runId);
      }
    }
    await vi.waitFor(async () => expect(await accepted(url, done)).toHaveLength(10), { timeout: 20_000, interval: 100 });
    const after = await costOf(stub);
    const perRun = (rowsRead(after) - rowsRead(before)) / 100;
    const alarmsRun = alarms(after) - alarms(before);
    console.log(
      `draining 100 of 20,000: ${perRun.toFixed(1)} rows read per run admitted, ${alarmsRun} alarms`,
      Object.fromEntries(
        Object.entries(after.byOperation).map(([op, o]) => [op, (o.rowsRead - (before.byOperation[op]?.rowsRead ?? 0)) / 100]),
      ),
    );
    // A run's own reads (admission, dispatch, its 202, its completion) are some 70 rows; a
    // pass over the backlog would be thousands.
    expect(perRun).toBeLessThanOrEqual(100);
    expect(alarmsRun).toBeLessThanOrEqual(10);
    // Oldest first: the runs admitted are the backlog's earliest fires.
    const firstRun = [...done].sort()[0]!;
    expect(await stateOf(stub, firstRun)).toBe("succeeded");
  });

  it("a retry that comes due during the backlog waits its turn: after the runs that came due before it, before those after", async () => {
    const { tenant, stub, url, job } = await limitedJob(2, "backlog-order");
    // A job of the same tenant whose first attempt fails: its retry comes due while the backlog waits.
    const flakyUrl = receiverPath("backlog-flaky", "status=500,202");
    const flaky = await jobOf(tenant.id, flakyUrl, {
      retry: { maxAttempts: 2, backoff: { initialMs: 1_500, maxMs: 1_500 }, jitter: "none" },
    });
    await stub.applyJobs([{ ...flaky, createdAt: Date.now() }]);
    const retried = await stub.trigger(flaky.id, { triggerKey: "once" });
    if (!retried.ok) throw new Error(retried.refusal);
    const retryId = retried.value.id;
    await vi.waitFor(
      async () =>
        expect(
          await stateOf(stub, retryId),
          JSON.stringify(
            await runInDurableObject(stub, (_s: Shard, state) => state.storage.sql.exec("SELECT * FROM attempt_log").toArray()),
          ) + JSON.stringify(await stub.getRun(retryId)),
        ).toBe("retry_wait"),
      {
        timeout: 15_000,
        interval: 50,
      },
    );
    // Before its retry is due: 30 runs (2 start, 28 wait).
    const before = new Set(await backfill(stub, job.id, 30, 120));
    // The retry comes due and waits behind them.
    await vi.waitFor(
      async () => {
        await runDurableObjectAlarm(stub);
        expect(await stateOf(stub, retryId)).toBe("waiting");
      },
      { timeout: 15_000, interval: 100 },
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    // After it: 30 more.
    const after = new Set(await backfill(stub, job.id, 30, 60));

    // Drain, noting the order the target saw.
    const done = new Set<string>();
    const order: string[] = [];
    while (![...before, ...after, retryId].every((id) => done.has(id))) {
      const running = await vi.waitFor(
        async () => {
          const list = [...(await accepted(url, done)), ...(await accepted(flakyUrl, done, 1))];
          expect(list.length).toBeGreaterThan(0);
          return list;
        },
        { timeout: 15_000, interval: 50 },
      );
      for (const { runId, token } of running) {
        done.add(runId);
        order.push(runId);
        await completed(runId, token);
      }
    }
    const position = order.indexOf(retryId);
    expect(position).toBeGreaterThan(-1);
    // (The job's own minutely fires, if one came meanwhile, are neither.)
    expect(order.slice(0, position).filter((id) => after.has(id))).toEqual([]);
    expect(order.slice(position + 1).filter((id) => before.has(id))).toEqual([]);
    expect(order.filter((id) => before.has(id) || after.has(id))).toHaveLength(60);
  });
  it("a fire while its tenant has runs parked here makes its runs parked in their insert, at the tail: no write as waiting first", async () => {
    // The helper's own job never fires here: the place and the line are the batches' alone.
    const { tenant, stub, url } = await limitedJob(1, "backlog-at-fire", { schedule: FAR_CRON });
    const settings = [{ id: tenant.id, version: 1, signingGeneration: 1, maxRunsInFlight: 1 }];
    // Three one-off jobs due together: one admitted (its target answers 202 and holds the place), two parked.
    const batch = async (at: number) => {
      const jobs = await Promise.all([0, 1, 2].map(() => jobOf(tenant.id, url, { schedule: { at: new Date(at).toISOString() } })));
      await stub.applyJobs(
        jobs.map((j) => ({ ...j, createdAt: Date.now() })),
        settings,
      );
      return jobs.map((j) => j.id);
    };
    const runsOf = (jobIds: string[]) =>
      runInDurableObject(stub, (_s: Shard, state) =>
        jobIds.map((id) => state.storage.sql.exec("SELECT state, due_at, parked_tenant FROM runs WHERE job_id = ?", id).toArray()[0]),
      );
    const first = await batch(Date.now() + 1_000);
    await vi.waitFor(
      async () => {
        await runDurableObjectAlarm(stub);
        const runs = await runsOf(first);
        expect(runs.filter((r) => r?.parked_tenant === tenant.id && r.due_at === null)).toHaveLength(2);
      },
      { timeout: 15_000, interval: 100 },
    );
    // The second batch fires with the line there: its three runs go straight to its tail.
    const second = await batch(Date.now() + 1_000);
    const before = await costOf(stub);
    await vi.waitFor(
      async () => {
        await runDurableObjectAlarm(stub);
        const runs = await runsOf(second);
        expect(runs.every((r) => r?.state === "waiting" && r.due_at === null && r.parked_tenant === tenant.id)).toBe(true);
      },
      { timeout: 15_000, interval: 100 },
    );
    const after = await costOf(stub);
    // A parked run's insert: its row and its entries in runs_parked, runs_waiting and runs_open; written waiting, then parked, it was 7.
    const perRun = ((after.byTable.runs ?? 0) - (before.byTable.runs ?? 0)) / 3;
    console.log("runs rows per parked run at fire", perRun);
    expect(perRun).toBeLessThanOrEqual(4);
  });
});

describe("permit renewals while the tenant's gate fails", () => {
  it("fold into one per permit, and the alarm that retries them backs off instead of firing every 2 s", async () => {
    const tenant = await createTenant({ maxRunsInFlight: 1 });
    const url = receiverPath("renewals-fail", "status=202");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, timeoutMs: 5_000 }, tenant.api);
    const triggered = await tenant.api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
    const runId = ((await triggered.json()) as { id: string }).id;
    const hit = await vi.waitFor(async () => {
      const [first] = await hitsOf(url);
      if (!first) throw new Error("the target has not been called yet");
      return first;
    });
    const token = hit.headers["x-edgecron-completion-token"]!;
    await expect.poll(async () => (await getRun(runId)).attemptLog?.[0]?.outcome).toBe("accepted");
    armFault("shard.permitRenew", Infinity, job.shard);
    try {
      for (let i = 0; i < 5; i++) {
        const beat = await api(`/v1/runs/${runId}/heartbeat`, { method: "POST", json: { token, extendMs: 600_000 } });
        expect(beat.status, await beat.clone().text()).toBe(200);
      }
      const pending = () =>
        runInDurableObject(shardOf(job), (s: Shard) => (s as unknown as { dispatcher: Dispatcher }).dispatcher.pendingRenewals());
      expect(await pending()).toBe(1);
      // Each alarm that finds the gate failing waits longer before the next.
      const gaps: number[] = [];
      for (let i = 0; i < 6; i++) {
        await runInDurableObject(shardOf(job), (_s: Shard, state) => state.storage.setAlarm(Date.now()));
        await runDurableObjectAlarm(shardOf(job));
        // When dispatch next asks for the alarm (the attempt's lease may ask sooner).
        const at = await runInDurableObject(shardOf(job), (s: Shard) =>
          (s as unknown as { dispatcher: Dispatcher }).dispatcher.nextDue(Date.now()),
        );
        gaps.push((at ?? 0) - Date.now());
      }
      console.log("alarm gaps while the gate fails (ms):", gaps);
      expect(await pending()).toBe(1);
      for (let i = 1; i < gaps.length; i++) expect(gaps[i]!).toBeGreaterThanOrEqual(gaps[i - 1]! - 100);
      expect(gaps.at(-1)!).toBeGreaterThan(30_000);
      expect(gaps.at(-1)!).toBeLessThanOrEqual(60_000);
    } finally {
      disarmFault("shard.permitRenew", job.shard);
    }
    expect((await api(`/v1/runs/${runId}/complete`, { method: "POST", json: { token, ok: true } })).status).toBe(200);
  });
});
