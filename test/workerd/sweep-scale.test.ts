import { env } from "cloudflare:test";
import { expect, it } from "vitest";
import { insertJob } from "../../src/catalog/jobs";
import { DEFAULT_TENANT, newJobId } from "../../src/model/ids";
import { CreateJobSchema } from "../../src/model/job";
import { SWEEP_BUDGET } from "../../src/reconcile/budget";
import { sweep } from "../../src/reconcile/sweep";
import { sealTarget } from "../../src/security/targets";
import { createJob, FAR_CRON, receiverPath, shardOf } from "./helpers";
import { meteredEnv } from "./metered-env";

const JOBS = 250_000;
/** Spread as a deployment that sized itself by the README's table would be. */
const SHARDS = 64;
const YEAR_AGO = Date.now() - 365 * 86_400_000;

/**
 * The sweep at 250,000 jobs, invocation by invocation, against the budget it must keep under
 * production's limits (which miniflare does not enforce).
 *
 * What the catalog holds, and why. The 250,000 rows are seeded in one INSERT … SELECT, as
 * deleted jobs (tombstones) last changed a year ago, over 64 shards that hold none of them. A
 * shard that lacks a deleted job is in sync with it, so every compareJobs call does the real
 * work of a synced catalog (the shard looks up each of its 1,000 ids and finds nothing to
 * repair), without seeding 250,000 jobs into 64 shards through applyJobs, which would take
 * minutes and measure the seeding. Seeding them live but unknown to their shards would instead
 * measure re-delivering 250,000 jobs, a disaster recovery and not the steady state the sweep's
 * cost is about; the repair path is exercised here by a few jobs whose shard call was lost,
 * spread over the pass, and a few made through the API. Their targets are sealed, so the
 * sealing search reads the whole table once, finds nothing, and is never run again. Last
 * changed a year ago, the rows are behind the change feed: the pass alone must find them.
 */
it("sweeps 250,000 jobs over many invocations, each within the budget, visiting every shard", { timeout: 120_000 }, async () => {
  const seeding = Date.now();
  await env.DB.prepare(
    `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
     INSERT INTO jobs (id, tenant_id, name, shard, version, spec, paused, created_at, updated_at, deleted_at)
     SELECT printf('job_%09dseeded0000', i), 'default', NULL, 'shard-' || (i % ?2), 2,
            '{"target":{"origin":"https://example.com","secrets":{"kid":"t1"}}}', 0, ?3, ?3, ?3 FROM n`,
  )
    .bind(JOBS, SHARDS, YEAR_AGO)
    .run();
  const seedMs = Date.now() - seeding;

  // Jobs whose shard call was lost, a year ago, on shards spread over the pass.
  const lost: Array<{ id: string; shard: string }> = [];
  for (const s of [0, 17, 40, 63]) {
    const id = newJobId(YEAR_AGO);
    const shard = `shard-${s}`;
    const { target, steps: _steps, ...spec } = CreateJobSchema.parse({ schedule: FAR_CRON, target: { url: receiverPath("scale-lost") } });
    const job = { id, tenantId: DEFAULT_TENANT, name: null, shard, version: 1, paused: false, pausedReason: null, deletedAt: null };
    const sealed = { ...spec, target: await sealTarget(env.ENCRYPTION_KEYS, target!, id) };
    await insertJob(env.DB, { ...job, spec: sealed, createdAt: YEAR_AGO, updatedAt: YEAR_AGO });
    lost.push({ id, shard });
  }
  const live = [await createJob({ schedule: FAR_CRON, target: { url: receiverPath("scale-live") } })];

  const catalogShards = (await env.DB.prepare("SELECT DISTINCT shard FROM jobs").all<{ shard: string }>()).results.map((r) => r.shard);
  const visited = new Set<string>();
  const figures: Array<{ queries: number; shardCalls: number; compared: number; ms: number }> = [];
  for (let n = 0; ; n++) {
    expect(n, "the pass completes").toBeLessThan(20);
    const metered = meteredEnv();
    const started = Date.now();
    const report = await sweep(metered.env);
    const ms = Date.now() - started;
    const queries = metered.spent.queries.length;
    const shardCalls = metered.spent.shardCalls.length;
    figures.push({ queries, shardCalls, compared: report.jobsCompared, ms });
    expect(queries).toBeLessThanOrEqual(SWEEP_BUDGET.d1Queries);
    expect(shardCalls).toBeLessThanOrEqual(SWEEP_BUDGET.shardCalls);
    // The sweep's own meter saw what really happened at the bindings.
    expect([report.d1Queries, report.shardCalls]).toEqual([queries, shardCalls]);
    for (const c of metered.spent.shardCalls) if (c.method === "assertAlarm") visited.add(c.shard);
    if (report.passCompleted) break;
  }
  console.log(JSON.stringify({ scale: { jobs: JOBS + lost.length + live.length, seedMs, invocations: figures.length, figures } }));

  expect(figures.length).toBeGreaterThan(1); // the budget, not the catalog, decided when to stop
  expect(figures.reduce((sum, f) => sum + f.compared, 0)).toBe(JOBS + lost.length + live.length);
  expect([...visited].sort()).toEqual(catalogShards.sort());
  for (const job of lost) {
    const held = (await shardOf(job).compareJobs([{ id: job.id, version: 1, deleted: false }])).stale;
    expect(held, `${job.id} on ${job.shard} was re-delivered`).toEqual([]);
  }

  // Everything sealed and nothing changed: the next invocation searches for nothing.
  const metered = meteredEnv();
  await sweep(metered.env);
  expect(metered.spent.queries.filter((sql) => sql.includes("json_type"))).toEqual([]);
});
