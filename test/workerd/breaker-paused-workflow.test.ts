import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import type { TenantGate } from "../../src/gate/tenant-gate";
import { stepRunId } from "../../src/model/ids";
import type { Job } from "../../src/model/job";
import type { Shard } from "../../src/shard/shard";
import { createJob, createTenant, FAR_CRON, fireNow, getRun, hitsOf, listRuns, receiverPath, shardOf } from "./helpers";

type Tenant = Awaited<ReturnType<typeof createTenant>>;

/** Fires the job once and waits until that run is in one of `states`. */
async function fireAndWait(job: Job, states: string[]): Promise<{ id: string }> {
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

/**
 * The step's wait ends (its due time now past, as when the breaker's `until` comes) and the
 * shard's alarm runs once; returns whether the step's due time and the alarm are after the
 * instant they were read at. An alarm armed at or before it is one the runtime starts again at
 * once: a spin.
 */
async function stepWaitEnds(job: Job, stepId: string): Promise<{ stepAhead: boolean; alarmAhead: boolean }> {
  const stub = shardOf(job);
  const dueOf = (state: DurableObjectState) => state.storage.sql.exec("SELECT due_at FROM runs WHERE id = ?", stepId).one().due_at;
  const ended = await runInDurableObject(stub, async (_s: Shard, state) => {
    const at = Date.now() - 1;
    state.storage.sql.exec("UPDATE runs SET due_at = ? WHERE id = ? AND state = 'waiting'", at, stepId);
    await state.storage.setAlarm(Date.now() + 3_600_000);
    return at;
  });
  await runDurableObjectAlarm(stub);
  // A settle still under way (the previous hold's) may have armed the alarm at the step's past due
  // time, and the runtime then runs it itself: read once an alarm has moved the step on.
  await vi.waitFor(async () => expect(await runInDurableObject(stub, (_s: Shard, state) => dueOf(state))).not.toBe(ended), {
    timeout: 10_000,
    interval: 20,
  });
  return runInDurableObject(stub, async (_s: Shard, state) => {
    const readAt = Date.now();
    const dueAt = state.storage.sql.exec("SELECT due_at FROM runs WHERE id = ?", stepId).one().due_at as number | null;
    const alarm = await state.storage.getAlarm();
    return { stepAhead: dueAt === null || dueAt > readAt, alarmAhead: alarm === null || alarm > readAt };
  });
}

describe("a paused workflow's step held by an open breaker", () => {
  it("goes on when its wait ends, as a paused workflow's steps under way do, and never leaves the alarm due in the past", async () => {
    const tenant = await createTenant();
    // Two other jobs of the tenant on the same origin, whose endpoints answer 503, open the breaker.
    const openers = await Promise.all(
      ["pwb-open-a", "pwb-open-b"].map((name) =>
        createJob(
          { schedule: FAR_CRON, target: { url: receiverPath(name, "status=503") }, retry: { maxAttempts: 1 }, breaker: true },
          tenant.api,
        ),
      ),
    );
    for (let i = 0; i < 3; i++) for (const opener of openers) await fireAndWait(opener, ["dead", "waiting"]);
    const url = receiverPath("pwb-step");
    const flow = await createJob(
      { schedule: FAR_CRON, steps: [{ id: "a", target: { url } }], retry: { maxAttempts: 1 }, breaker: true },
      tenant.api,
    );
    const run = await fireAndWait(flow, ["running"]);
    const step = stepRunId(run.id, "a");
    // The consumer found the breaker open: the step waits, its attempt unspent.
    await vi.waitFor(async () => expect((await getRun(run.id)).steps![0]).toMatchObject({ id: "a", state: "waiting" }), {
      timeout: 15_000,
      interval: 50,
    });

    // Paused: the workflow run under way keeps its step (docs/workflows.md, "Pause, resume, delete").
    expect((await tenant.api(`/v1/jobs/${flow.id}/pause`, { method: "POST" })).status).toBe(200);
    expect((await getRun(run.id)).steps![0]!.state).toBe("waiting");

    // Its wait ends while the breaker is still open, three times over: each time the step goes on
    // (dispatched, then held again by the consumer): neither it nor the alarm is left due in the past.
    const armed: Array<{ stepAhead: boolean; alarmAhead: boolean }> = [];
    for (let i = 0; i < 3; i++) {
      armed.push(await stepWaitEnds(flow, step));
      await vi.waitFor(async () => expect((await getRun(run.id)).steps![0]!.state).toBe("waiting"), { timeout: 15_000, interval: 50 });
    }
    expect(armed).toEqual(Array.from({ length: 3 }, () => ({ stepAhead: true, alarmAhead: true })));
    expect((await getRun(run.id)).steps![0]!.error).toMatch(/^circuit breaker open for /);
    expect(await hitsOf(url)).toHaveLength(0);

    // The cooldown over, the step is the breaker's probe: it runs and its workflow run ends, paused or not.
    await coolDown(tenant);
    expect(await stepWaitEnds(flow, step)).toEqual({ stepAhead: true, alarmAhead: true });
    await vi.waitFor(async () => expect((await getRun(run.id)).state).toBe("succeeded"), { timeout: 15_000, interval: 50 });
    expect(await hitsOf(url)).toHaveLength(1);
  });
});
