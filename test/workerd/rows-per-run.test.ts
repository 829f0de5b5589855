import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { scheduledRunId, shardNamedBy } from "../../src/model/ids";
import type { Job } from "../../src/model/job";
import type { ShardCost } from "../../src/protocol/shard-rpc";
import type { JobDefinition, TenantSettings } from "../../src/protocol/stored-rows";
import { jobIdOfMessage } from "../../src/qstash/ids";
import type { Shard } from "../../src/shard/shard";
import { gateStub } from "../../src/stubs";
import { makeDue } from "./entries";
import { api, createJob, createTenant, definition, FAR_CRON, receiverPath, specLike } from "./helpers";

/**
 * SQLite rows written per successful run, as a shard's cost meter counts them (each index entry
 * written is a row billed: docs/cost.md). Row counts do not depend on the machine's speed, so
 * they are asserted: a change that adds a row to every run fails here, and docs/cost.md says
 * where each remaining row goes.
 *
 * The jobs are applied to one shard of the test's own, so that they share it as a deployment's
 * jobs share its shards (a shard's first job writes rows once: its tenant, its retention
 * schedule); their runs go through the real queue, consumer and a local target.
 *
 * D1 rows are counted by the Worker's cost meter per API route, each statement's `rows_written`
 * (a trigger's writes included), through the real API.
 */

const rowsWritten = (cost: ShardCost) => Object.values(cost.byOperation).reduce((n, o) => n + o.rowsWritten, 0);

async function runsSucceeded(shard: DurableObjectStub<Shard>, runIds: string[]): Promise<void> {
  await vi.waitFor(
    async () => {
      for (const id of runIds) expect((await shard.getRun(id))?.state, id).toBe("succeeded");
    },
    { timeout: 20_000, interval: 100 },
  );
}

/** Rows written per run between two readings of the shard's meter, in all, by operation and by table. */
function perRun(
  before: ShardCost,
  after: ShardCost,
  runs: number,
): { all: number; byOperation: Record<string, number>; byTable: Record<string, number> } {
  const per = (a: Record<string, number>, b: Record<string, number>) =>
    Object.fromEntries(
      Object.entries(a)
        .map(([name, rows]) => [name, (rows - (b[name] ?? 0)) / runs] as const)
        .filter(([, rows]) => rows > 0),
    );
  const written = (c: ShardCost) => Object.fromEntries(Object.entries(c.byOperation).map(([name, o]) => [name, o.rowsWritten]));
  return {
    all: (rowsWritten(after) - rowsWritten(before)) / runs,
    byOperation: per(written(after), written(before)),
    byTable: per(after.byTable, before.byTable),
  };
}

/**
 * At most `rows` written by statements and `alarms` alarms set per run: `setAlarm` is billed as a
 * row written too, and counted apart here so that a change that adds either fails.
 */
function expectRows(per: { all: number; byTable: Record<string, number> }, rows: number, alarms: number): void {
  const set = per.byTable["(setAlarm)"] ?? 0;
  expect(per.all - set, "rows written by statements").toBeLessThanOrEqual(rows);
  expect(set, "alarms set").toBeLessThanOrEqual(alarms);
}

const costOf = async (shard: DurableObjectStub<Shard>) => (await shard.metrics(3_600_000)).cost;

type RouteCost = { calls: number; rowsWritten: number };

/** D1 rows written by the Worker per API route, from its cost meter (recorded after each response). */
async function routeCosts(): Promise<Record<string, RouteCost>> {
  const res = await api("/v1/metrics?window=1h");
  return ((await res.json()) as { cost: { workerOperations: Record<string, RouteCost> } }).cost.workerOperations;
}

/** Runs `calls`, then the rows each route they went through wrote, per call, once the meter holds them all. */
async function rowsPerCall(calls: Record<string, number>, run: () => Promise<void>): Promise<Record<string, number>> {
  const before = await routeCosts();
  await run();
  return vi.waitFor(
    async () => {
      const after = await routeCosts();
      const per: Record<string, number> = {};
      for (const [route, count] of Object.entries(calls)) {
        const b = before[route] ?? { calls: 0, rowsWritten: 0 };
        const a = after[route] ?? { calls: 0, rowsWritten: 0 };
        expect(a.calls - b.calls, route).toBe(count);
        per[route] = (a.rowsWritten - b.rowsWritten) / count;
      }
      return per;
    },
    { timeout: 15_000, interval: 200 },
  );
}

const oneOff = () => ({ schedule: { at: new Date(Date.now() + 3_600_000).toISOString() }, target: { url: receiverPath("rows-d1") } });

describe("D1 rows written per job created and changed (docs/cost.md)", () => {
  it("a job created: its row, its entry in jobs_by_tenant and its audit entry, nothing for the sweep", async () => {
    const rows = await rowsPerCall({ "POST /v1/jobs": 5 }, async () => {
      // As in a deployment whose default tenant has jobs on every shard: the registry of shards
      // holds its pairs (only meanwhile: the metrics would otherwise ask all 4,096 shards).
      await env.DB.prepare(
        `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
         INSERT OR IGNORE INTO shard_tenants (shard, tenant_id) SELECT 'shard-' || i, 'default' FROM n`,
      )
        .bind(Number(env.SHARD_COUNT))
        .run();
      for (let i = 0; i < 5; i++) await createJob(oneOff());
      await env.DB.prepare(
        "DELETE FROM shard_tenants WHERE tenant_id = 'default' AND shard NOT IN (SELECT shard FROM jobs WHERE tenant_id = 'default')",
      ).run();
    });
    expect(rows).toEqual({ "POST /v1/jobs": 3 });
  });

  it("a tenant's first job on a shard also registers the shard for the tenant: 2 rows more, once", async () => {
    const tenant = await createTenant();
    const shards = new Set<string>();
    const rows = await rowsPerCall({ "POST /v1/jobs": 5 }, async () => {
      for (let i = 0; i < 5; i++) shards.add((await createJob(oneOff(), tenant.api)).shard);
    });
    expect(rows["POST /v1/jobs"]! * 5).toBe(5 * 3 + shards.size * 2);
  });

  it("a QStash message writes none: no catalog row, no audit entry, its shard already registered for its tenant", async () => {
    const tenant = await createTenant();
    const ids: string[] = [];
    const rows = await rowsPerCall({ "POST /v2/publish/*": 5 }, async () => {
      // As for a tenant with messages on every shard already (the test above says why, and
      // what a first one costs): the registry holds its pairs meanwhile.
      await env.DB.prepare(
        `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
         INSERT OR IGNORE INTO shard_tenants (shard, tenant_id) SELECT 'shard-' || i, ?2 FROM n`,
      )
        .bind(Number(env.SHARD_COUNT), tenant.id)
        .run();
      for (let i = 0; i < 5; i++) {
        const res = await tenant.api(`/v2/publish/${receiverPath("rows-d1")}`, {
          method: "POST",
          headers: { "Upstash-Delay": "1h" },
          body: "x",
        });
        expect(res.status, await res.clone().text()).toBe(200);
        ids.push(((await res.json()) as { messageId: string }).messageId);
      }
      const kept = ids.map((id) => `'${shardNamedBy(jobIdOfMessage(id)!)}'`).join(", ");
      await env.DB.prepare(`DELETE FROM shard_tenants WHERE tenant_id = ? AND shard NOT IN (${kept})`).bind(tenant.id).run();
    });
    expect(rows).toEqual({ "POST /v2/publish/*": 0 });
  });

  it("a change: PATCH, pause, resume and delete each write the row, its entry in jobs_changed and the audit entry", async () => {
    const jobs: Job[] = [];
    for (let i = 0; i < 3; i++) jobs.push(await createJob({ schedule: FAR_CRON, target: { url: receiverPath("rows-d1") } }));
    const rows = await rowsPerCall(
      { "PATCH /v1/jobs/:id": 6, "POST /v1/jobs/:id/pause": 3, "POST /v1/jobs/:id/resume": 3, "DELETE /v1/jobs/:id": 3 },
      async () => {
        const call = async (path: string, init: Parameters<typeof api>[1]) => expect((await api(path, init)).status).toBe(200);
        // The first change puts the job in jobs_changed, the second moves it there: both 2 rows, and the audit entry.
        for (const j of jobs) await call(`/v1/jobs/${j.id}`, { method: "PATCH", json: { name: "first" } });
        for (const j of jobs) await call(`/v1/jobs/${j.id}`, { method: "PATCH", json: { name: "second" } });
        for (const j of jobs) await call(`/v1/jobs/${j.id}/pause`, { method: "POST" });
        for (const j of jobs) await call(`/v1/jobs/${j.id}/resume`, { method: "POST" });
        for (const j of jobs) await call(`/v1/jobs/${j.id}`, { method: "DELETE" });
      },
    );
    expect(rows).toEqual({
      "PATCH /v1/jobs/:id": 3,
      "POST /v1/jobs/:id/pause": 3,
      "POST /v1/jobs/:id/resume": 3,
      "DELETE /v1/jobs/:id": 3,
    });
  });
});

/**
 * `count` one-off jobs applied to `shard` one call each, fired together and run to success.
 * Due a moment after they are all created (20 calls take well under a second), so that one
 * alarm fires them together: the runtime's own, or this test's if it comes first.
 */
async function oneOffRuns(shard: DurableObjectStub<Shard>, count: number, standalone = false, tenant?: TenantSettings): Promise<void> {
  const at = Date.now() + 3_000;
  const spec = await specLike({ at: new Date(at).toISOString() });
  const jobs = Array.from({ length: count }, () => ({
    ...definition(spec, Date.now()),
    ...(standalone && { standalone }),
    ...(tenant && { tenantId: tenant.id }),
  }));
  for (const job of jobs) await shard.applyJobs([job], tenant ? [tenant] : []); // one creation, one call
  await new Promise((resolve) => setTimeout(resolve, at - Date.now()));
  await runDurableObjectAlarm(shard);
  await runsSucceeded(
    shard,
    jobs.map((j) => scheduledRunId(j.id, at)),
  );
}

describe("rows written per successful run", () => {
  it("a one-off job's run: create, fire, claim and report", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900001"));
    const oneOff = (count: number) => oneOffRuns(shard, count);
    await oneOff(1); // the shard's first job
    const before = await costOf(shard);
    await oneOff(20);
    const { all, byOperation, byTable } = perRun(before, await costOf(shard), 20);
    console.log(`one-off run, 20 fired together: ${all.toFixed(2)} SQLite rows written`, byOperation, byTable);
    // A one-off job's fire writes no row of the job (the alarm's position says it fired), and its
    // entry in jobs_next_due keeps its run's claim deadline (fired-through.ts).
    expectRows({ all, byTable }, 5, 0.2);

    const beforeAlone = await costOf(shard);
    await oneOff(1);
    const alone = perRun(beforeAlone, await costOf(shard), 1);
    console.log(`one-off run fired alone: ${alone.all.toFixed(2)} SQLite rows written`, alone.byOperation, alone.byTable);
    expectRows(alone, 5, 3);
  });

  it("a one-off job's run as a tenant with the default limits: the permit taken before the fire, no waiting write, none leaked", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900005"));
    const created = await createTenant();
    const gate = gateStub(env, created.id);
    const tenant: TenantSettings = { id: created.id, version: 1, signingGeneration: 1, maxRunsInFlight: 1_000 };
    const oneOff = (count: number) => oneOffRuns(shard, count, false, tenant);
    const gateRows = async () => Object.values((await gate.cost(3_600_000)).byOperation).reduce((n, o) => n + o.rowsWritten, 0);
    // Every permit goes back once its run ended: the gate's count is where it began.
    const released = () => vi.waitFor(async () => expect(await gate.inFlight()).toBe(0), { timeout: 10_000, interval: 50 });
    await oneOff(1); // the shard's first job
    await released();
    const [before, gateBefore] = [await costOf(shard), await gateRows()];
    await oneOff(20);
    await released();
    const together = perRun(before, await costOf(shard), 20);
    const gateTogether = ((await gateRows()) - gateBefore) / 20;
    console.log(
      `tenant's one-off run, 20 fired together: ${together.all.toFixed(2)} SQLite rows written, and ${gateTogether.toFixed(2)} at its gate`,
      together.byOperation,
      together.byTable,
      (await gate.cost(3_600_000)).byTable,
    );
    // As many as the admin's: the run is made dispatched with its permit, never written waiting.
    expectRows(together, 5, 0.2);
    // Its permit taken (one row) and given back (one row), a call for many runs each way.
    expect(gateTogether).toBeLessThanOrEqual(2.2);

    const [beforeAlone, gateBeforeAlone] = [await costOf(shard), await gateRows()];
    await oneOff(1);
    await released();
    const alone = perRun(beforeAlone, await costOf(shard), 1);
    const gateAlone = (await gateRows()) - gateBeforeAlone;
    console.log(
      `tenant's one-off run fired alone: ${alone.all.toFixed(2)} SQLite rows written, ${gateAlone} at its gate`,
      alone.byOperation,
      alone.byTable,
    );
    expectRows(alone, 5, 3);
    expect(gateAlone).toBeLessThanOrEqual(3);
  });

  it("a QStash message's run (held by its shard alone): the one-off's rows and its entry in jobs_standalone", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900004"));
    await oneOffRuns(shard, 1, true); // the shard's first job
    const before = await costOf(shard);
    await oneOffRuns(shard, 20, true);
    const { all, byOperation, byTable } = perRun(before, await costOf(shard), 20);
    console.log(`message run, 20 fired together: ${all.toFixed(2)} SQLite rows written`, byOperation, byTable);
    // One more than a one-off job's: the index a tenant's messages are listed by.
    expectRows({ all, byTable }, 6, 0.2);
  });

  it("a run of a recurring job, fired alone or with others: fire, claim and report", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900002"));
    const spec = await specLike({ every: "1h" });
    const jobs = Array.from({ length: 10 }, () => definition(spec, Date.now()));
    await shard.applyJobs(jobs);
    // The jobs' next fires made due now, where they are: on the job's row before its first fire,
    // then on its latest run, which carries it (fired-through.ts).
    const fire = async (fired: JobDefinition[]) => {
      const at = Date.now() - 1;
      await makeDue(
        shard,
        fired.map((job) => job.id),
        at,
      );
      await runDurableObjectAlarm(shard);
      await runsSucceeded(
        shard,
        fired.map((job) => scheduledRunId(job.id, at)),
      );
    };
    const alone = [jobs[0]!];
    await fire(alone);
    const before = await costOf(shard);
    for (let i = 0; i < 10; i++) await fire(alone);
    const { all, byOperation, byTable } = perRun(before, await costOf(shard), 10);
    console.log(`recurring run fired alone: ${all.toFixed(2)} SQLite rows written`, byOperation, byTable);
    // The run carries its job's next fire; the entry that fired it is its claim deadline.
    expectRows({ all, byTable }, 4, 1);

    await fire(jobs);
    const beforeTogether = await costOf(shard);
    for (let i = 0; i < 3; i++) await fire(jobs);
    const together = perRun(beforeTogether, await costOf(shard), 30);
    console.log(`recurring run fired with others: ${together.all.toFixed(2)} SQLite rows written`, together.byOperation, together.byTable);
    expectRows(together, 4, 0.2);

    // A job that counts its fires (maxRuns) carries the count on its run too.
    const counted = definition(await specLike({ every: "1h", maxRuns: 1_000 }), Date.now());
    await shard.applyJobs([counted]);
    await fire([counted]);
    const beforeCounted = await costOf(shard);
    for (let i = 0; i < 5; i++) await fire([counted]);
    const countedRun = perRun(beforeCounted, await costOf(shard), 5);
    console.log(`recurring run with maxRuns: ${countedRun.all.toFixed(2)} SQLite rows written`, countedRun.byOperation, countedRun.byTable);
    expectRows(countedRun, 4, 1);
  });

  it("a run of a frequent job (due again within a claim timeout): fire, claim and report", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900003"));
    const job = definition(await specLike({ every: "2s" }), Date.now());
    await shard.applyJobs([job]);
    // Read between two fires: every run fired so far has succeeded, so no run is half counted.
    const settledAt = (runs: number) =>
      vi.waitFor(
        async () => {
          const states = await runInDurableObject(shard, (_s: Shard, state) =>
            state.storage.sql
              .exec("SELECT state FROM runs WHERE job_id = ?", job.id)
              .toArray()
              .map((r) => r.state),
          );
          expect(states.length).toBeGreaterThanOrEqual(runs);
          expect(states.every((s) => s === "succeeded")).toBe(true);
          return { runs: states.length, cost: await costOf(shard) };
        },
        { timeout: 30_000, interval: 50 },
      );
    // Its first fire makes it frequent (the job enters jobs_frequent once); counted from the second.
    const before = await settledAt(2);
    const after = await settledAt(before.runs + 4);
    const { all, byOperation, byTable } = perRun(before.cost, after.cost, after.runs - before.runs);
    console.log(`frequent job's run: ${all.toFixed(2)} SQLite rows written`, byOperation, byTable);
    // The run, its outcome and its lease row: the job's row is written at most once a minute (frequent-jobs.ts).
    expectRows({ all, byTable }, 3, 1);
    // Its runs never entered runs_due: their claim deadlines are the job's to look at.
    const due = await runInDurableObject(shard, (_s: Shard, state) =>
      state.storage.sql.exec("SELECT COUNT(*) AS n FROM runs WHERE job_id = ? AND due_at IS NOT NULL", job.id).one(),
    );
    expect(due.n).toBe(0);
  });
});
