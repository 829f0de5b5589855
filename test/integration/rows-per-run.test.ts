import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { newJobId, scheduledRunId } from "../../src/model/ids";
import type { JobSpec } from "../../src/model/job";
import type { JobDefinition, ShardCost } from "../../src/shard/contract";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, FAR_CRON, receiverPath, shardOf } from "./helpers";

/**
 * SQLite rows written per successful run, as a shard's cost meter counts them (each index entry
 * written is a row billed: docs/cost.md). Row counts do not depend on the machine's speed, so
 * they are asserted: a change that adds a row to every run fails here, and docs/cost.md says
 * where each remaining row goes.
 *
 * The jobs are applied to one shard of the test's own, so that they share it as a deployment's
 * jobs share its shards (a shard's first job writes rows once: its tenant, its retention
 * schedule); their runs go through the real queue, consumer and a local target.
 */

/** The spec the API stored for a job (its target sealed as the API seals it), with `schedule`. */
async function specLike(schedule: JobSpec["schedule"]): Promise<JobSpec> {
  const template = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("rows") } });
  const spec = await runInDurableObject(shardOf(template), (_s: Shard, state) =>
    JSON.parse(state.storage.sql.exec("SELECT spec FROM jobs WHERE id = ?", template.id).one().spec as string),
  );
  return { ...spec, schedule };
}

function definition(spec: JobSpec, now: number): JobDefinition {
  return { id: newJobId(now), tenantId: "default", version: 1, spec, paused: false, deleted: false, createdAt: now };
}

const rowsWritten = (cost: ShardCost) => Object.values(cost.byOperation).reduce((n, o) => n + o.rowsWritten, 0);

async function runsSucceeded(shard: DurableObjectStub<Shard>, runIds: string[]): Promise<void> {
  await vi.waitFor(
    async () => {
      for (const id of runIds) expect((await shard.getRun(id))?.state, id).toBe("succeeded");
    },
    { timeout: 20_000, interval: 100 },
  );
}

/** Rows written per run between two readings of the shard's meter, in all and by operation. */
function perRun(before: ShardCost, after: ShardCost, runs: number): { all: number; byOperation: Record<string, number> } {
  const byOperation = Object.fromEntries(
    Object.entries(after.byOperation)
      .map(([name, o]) => [name, (o.rowsWritten - (before.byOperation[name]?.rowsWritten ?? 0)) / runs] as const)
      .filter(([, rows]) => rows > 0),
  );
  return { all: (rowsWritten(after) - rowsWritten(before)) / runs, byOperation };
}

const costOf = async (shard: DurableObjectStub<Shard>) => (await shard.metrics(3_600_000)).cost;

describe("D1 rows written per job created", () => {
  it("the catalog row and its three indexes (docs/cost.md)", async () => {
    const created = async () => {
      const res = await api("/v1/metrics?window=1h");
      const cost = ((await res.json()) as { cost: { workerOperations: Record<string, { calls: number; rowsWritten: number }> } }).cost;
      return cost.workerOperations["POST /v1/jobs"] ?? { calls: 0, rowsWritten: 0 };
    };
    await createJob({ schedule: FAR_CRON, target: { url: receiverPath("rows-d1") } }); // the tenant's first
    const before = await vi.waitFor(async () => {
      const c = await created();
      expect(c.calls).toBeGreaterThan(0);
      return c;
    });
    for (let i = 0; i < 5; i++)
      await createJob({ schedule: { at: new Date(Date.now() + 3_600_000).toISOString() }, target: { url: receiverPath("rows-d1") } });
    // The Worker records its D1 counts after each response.
    const after = await vi.waitFor(
      async () => {
        const c = await created();
        expect(c.calls - before.calls).toBe(5);
        return c;
      },
      { timeout: 5_000, interval: 100 },
    );
    expect((after.rowsWritten - before.rowsWritten) / 5).toBe(4);
  });
});

describe("rows written per successful run", () => {
  it("a one-off job's run: create, fire, claim and report", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900001"));
    const oneOff = async (count: number) => {
      const at = Date.now() - 1_000;
      const spec = await specLike({ at: new Date(at).toISOString() });
      const jobs = Array.from({ length: count }, () => definition(spec, Date.now()));
      for (const job of jobs) await shard.applyJobs([job]); // one creation, one call
      await runDurableObjectAlarm(shard);
      await runsSucceeded(
        shard,
        jobs.map((j) => scheduledRunId(j.id, at)),
      );
    };
    await oneOff(1); // the shard's first job
    const before = await costOf(shard);
    await oneOff(20);
    const { all, byOperation } = perRun(before, await costOf(shard), 20);
    console.log(`one-off run: ${all.toFixed(2)} SQLite rows written`, byOperation);
    expect(all).toBeLessThanOrEqual(7);
  });

  it("a run of a recurring job: fire, claim and report", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900002"));
    const spec = await specLike({ every: "1h" });
    const job = definition(spec, Date.now());
    await shard.applyJobs([job]);
    const fire = async () => {
      const at = Date.now() - 1;
      await runInDurableObject(shard, (_s: Shard, state) => {
        state.storage.sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", at, job.id);
      });
      await runDurableObjectAlarm(shard);
      await runsSucceeded(shard, [scheduledRunId(job.id, at)]);
    };
    await fire();
    const before = await costOf(shard);
    for (let i = 0; i < 10; i++) await fire();
    const { all, byOperation } = perRun(before, await costOf(shard), 10);
    console.log(`recurring run: ${all.toFixed(2)} SQLite rows written`, byOperation);
    expect(all).toBeLessThanOrEqual(6);
  });
});
