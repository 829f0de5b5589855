import { env } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { percentile } from "../../src/app/metrics";
import { forgetCostWrites } from "../../src/catalog/cost";
import { PRICES } from "../../src/cost/prices";
import { usdOf } from "../../src/cost/usd";
import { armFault, disarmFault } from "../../src/faults";
import { api, createJob, createTenant, FAR_CRON, fireNow, listRuns, receiverPath, shardOf, waitForRun } from "./helpers";

type Cost = Record<string, any>;

async function costNow(): Promise<Cost> {
  const res = await api("/v1/metrics?window=1h");
  expect(res.status).toBe(200);
  return ((await res.json()) as { cost: Cost }).cost;
}

/** n one-off jobs due already, each run to success. */
async function oneOffRuns(n: number): Promise<void> {
  const jobs = await Promise.all(
    Array.from({ length: n }, () =>
      createJob({ schedule: { at: new Date(Date.now() - 1_000).toISOString() }, target: { url: receiverPath("m-cost") } }),
    ),
  );
  for (const job of jobs) {
    await vi.waitFor(
      async () => {
        const runs = await listRuns(job.id);
        if (runs[0]?.state !== "succeeded") throw new Error(`job ${job.id}: ${runs[0]?.state ?? "no run yet"}`);
      },
      { timeout: 15_000, interval: 100 },
    );
  }
}

const op = (cost: Cost, group: "shardOperations" | "workerOperations", name: string, field: string): number =>
  cost[group][name]?.[field] ?? 0;

describe("GET /v1/metrics", () => {
  it("reports runs by state, fire lag, backlog and failure rate across shards", async () => {
    const ok = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("m-ok") } });
    const bad = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("m-bad", "status=400") } });
    for (const job of [ok, bad]) await fireNow(job);
    await waitForRun((await listRuns(ok.id))[0]!.id, ["succeeded"]);
    await waitForRun((await listRuns(bad.id))[0]!.id, ["failed"]);

    const res = await api("/v1/metrics?window=1h");
    expect(res.status).toBe(200);
    const m = (await res.json()) as Record<string, any>;
    expect(m.windowMs).toBe(3_600_000);
    expect(m.runsByState).toEqual({ succeeded: 1, failed: 1 });
    expect(m.attempts.byOutcome).toEqual({ succeeded: 1, failed: 1 });
    expect(m.attempts.failureRate).toBe(0.5);
    expect(m.fireLagMs.count).toBe(2);
    expect(m.fireLagMs.p50).toBeGreaterThanOrEqual(0);
    expect(m.fireLagMs.max).toBeGreaterThanOrEqual(m.fireLagMs.p50);
    expect(m).toMatchObject({ outbox: 0, awaitingClaim: 0, oldestAwaitingClaimMs: null });
  });

  it("counts what runs cost, per operation, growing with the runs, and prices it at the one table", async () => {
    const before = await costNow();
    await oneOffRuns(2);
    const two = await costNow();
    await oneOffRuns(6);
    // The Worker records its D1 counts after each response: wait for the last creation's.
    const eight = await vi.waitFor(
      async () => {
        const cost = await costNow();
        const created = op(cost, "workerOperations", "POST /v1/jobs", "calls") - op(before, "workerOperations", "POST /v1/jobs", "calls");
        if (created < 8) throw new Error(`${created} creations recorded`);
        return cost;
      },
      { timeout: 5_000, interval: 100 },
    );

    const delta = (a: Cost, b: Cost, key: string) => b.totals[key] - a.totals[key];
    expect(two.runsFinished - before.runsFinished).toBe(2);
    expect(eight.runsFinished - two.runsFinished).toBe(6);
    expect(eight.totals.queueMessages - two.totals.queueMessages).toBe(6);
    // Each run writes rows (run, job, indexes) and reads some: six runs cost more than two.
    for (const key of ["sqlRowsWritten", "sqlRowsRead", "doRequests"]) {
      expect(delta(before, two, key), key).toBeGreaterThan(0);
      expect(delta(two, eight, key), key).toBeGreaterThan(delta(before, two, key));
    }
    // Where the rows go: creation (and firing and dispatching, in the alarm or after a change)
    // and reporting each wrote some. There is no claim: a run's attempt begins with its dispatch.
    expect(op(eight, "shardOperations", "claim", "calls")).toBe(0);
    for (const name of ["applyJobs", "report"]) {
      expect(op(eight, "shardOperations", name, "rowsWritten") - op(two, "shardOperations", name, "rowsWritten"), name).toBeGreaterThan(0);
    }
    expect(op(eight, "shardOperations", "applyJobs", "calls") - op(two, "shardOperations", "applyJobs", "calls")).toBe(6);
    const d1Written =
      op(eight, "workerOperations", "POST /v1/jobs", "rowsWritten") - op(two, "workerOperations", "POST /v1/jobs", "rowsWritten");
    expect(d1Written).toBeGreaterThanOrEqual(6); // a catalog row per job, and its index entries
    // The meters' own rows are reported apart, not hidden in the operations'.
    expect(eight.meter.sqlRowsWritten).toBeGreaterThan(0);
    // Priced at the one table.
    expect(eight.prices).toEqual({ ...PRICES, pages: [...PRICES.pages] });
    expect(eight.usd).toBeCloseTo(usdOf(eight.totals, PRICES), 12);
    expect(eight.usdPerMillionRuns).toBeCloseTo((eight.usd / eight.runsFinished) * 1_000_000, 6);
    expect(eight.perRun.sqlRowsWritten).toBeCloseTo(eight.totals.sqlRowsWritten / eight.runsFinished, 9);
  });

  it("the Worker's cost minutes are kept 25 hours: older ones go with the next write of an isolate", async () => {
    const minute = Math.floor(Date.now() / 60_000);
    const insert = env.DB.prepare(
      `INSERT INTO cost_minutes (minute, operation, calls, rows_read, rows_written, gate_requests, meter_rows_read, meter_rows_written)
       VALUES (?, ?, 1, 0, 0, 0, 0, 0)`,
    );
    await env.DB.batch([insert.bind(minute - 26 * 60, "old"), insert.bind(minute - 24 * 60, "kept")]);
    forgetCostWrites();
    expect((await api("/v1/metrics?window=1m")).status).toBe(200);
    const left = await env.DB.prepare("SELECT operation FROM cost_minutes WHERE operation IN ('old', 'kept')").all<{ operation: string }>();
    expect(left.results.map((r) => r.operation)).toEqual(["kept"]);
  });

  it("a tenant key sees no cost: the meters count the whole scheduler", async () => {
    const tenant = await createTenant();
    const res = await tenant.api("/v1/metrics");
    expect(res.status).toBe(200);
    expect(((await res.json()) as { cost: unknown }).cost).toBeNull();
  });

  it("a tenant sees its own unsent dispatches only, not the rest of its shard's outbox", async () => {
    const tenant = await createTenant();
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("m-outbox") } }, tenant.api);
    const shard = shardOf(job);
    // The Queue refuses every send from this shard until the end, so the fire's dispatch stays unsent.
    armFault("shard.queueSend", Infinity, job.shard);
    try {
      await fireNow(job);
      await vi.waitFor(async () => expect((await shard.metrics(60_000, null)).outbox).toBe(1), { timeout: 5_000, interval: 50 });
      expect((await shard.metrics(60_000, tenant.id)).outbox).toBe(1);
      expect((await shard.metrics(60_000, "ten_someone_else")).outbox).toBe(0);
    } finally {
      disarmFault("shard.queueSend", job.shard);
    }
  });

  it.each(["abc", "2d", "0s"])("window=%s → 400", async (window) => {
    const res = await api(`/v1/metrics?window=${window}`);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { issues: [{ path: "window" }] } });
  });

  it("nearest-rank percentiles", () => {
    expect(percentile([], 50)).toBeNull();
    expect(percentile([5], 99)).toBe(5);
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(xs, 50)).toBe(50);
    expect(percentile(xs, 90)).toBe(90);
    expect(percentile(xs, 99)).toBe(99);
  });
});
