import { env } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { CHANGED_SINCE_SQL, firstIdAt, getJob, JOBS_AFTER_SQL, toDefinition, updateJob } from "../../src/catalog/jobs";
import { NEXT_SHARD_SQL } from "../../src/catalog/shards";
import { TENANTS_OF_SHARD_SQL } from "../../src/catalog/tenants";
import { armFault, disarmFaults } from "../../src/faults";
import { CHANGES_MARGIN_MS } from "../../src/reconcile/changes";
import { sweep } from "../../src/reconcile/sweep";
import { api, lostJob, shardOf } from "./helpers";
import { meteredEnv } from "./metered-env";

const held = async (job: { id: string; shard: string }, version = 1) =>
  (await shardOf(job).compareJobs([{ id: job.id, version, deleted: false }])).stale.length === 0;

const plan = async (sql: string, ...params: unknown[]) =>
  (
    await env.DB.prepare(`EXPLAIN QUERY PLAN ${sql}`)
      .bind(...params)
      .all<{ detail: string }>()
  ).results.map((r) => r.detail);

/** Puts the pass past every shard and every job: the invocation's pass compares nothing. */
const passAtItsEnd = () => env.DB.prepare("UPDATE sweep_state SET pass_shard = '~', pass_after = '~'").run();

/** A job in the catalog whose shard holds an older version: a PATCH whose shard call was lost. */
async function lostChange(shard: string, createdAt: number, changedAt: number) {
  const job = await lostJob(shard, createdAt);
  await shardOf(job).applyJobs([toDefinition((await getJob(env.DB, job.id))!)]);
  await updateJob(env.DB, job.id, { name: "changed" }, changedAt);
  return job;
}

describe("the sweep's queries", () => {
  it("the change feed reads new jobs as a range of the key and changed ones through jobs_changed, sorting nothing", async () => {
    const created = (await plan(JOBS_AFTER_SQL, "", 10)).join("\n");
    expect(created).toMatch(/SEARCH jobs USING PRIMARY KEY \(id>\?\)/);
    expect(created).not.toMatch(/TEMP B-TREE/);
    const changed = (await plan(CHANGED_SINCE_SQL, 0, "", 10)).join("\n");
    expect(changed).toMatch(/SEARCH jobs USING INDEX jobs_changed/);
    expect(changed).not.toMatch(/TEMP B-TREE/);
  });

  it("the pass finds the next shard and its tenants by seeks of the registry of shards", async () => {
    expect((await plan(NEXT_SHARD_SQL, "shard-1")).join("\n")).toMatch(
      /SEARCH shard_tenants USING (COVERING INDEX \w+|PRIMARY KEY) \(shard>\?\)/,
    );
    const tenants = await plan(TENANTS_OF_SHARD_SQL, "shard-1");
    expect(tenants.join("\n")).toMatch(/SEARCH s USING (COVERING INDEX \w+|PRIMARY KEY) \(shard=\?\)/);
    expect(tenants.join("\n")).toMatch(/SEARCH t USING INDEX sqlite_autoindex_tenants_1 \(id=\?\)/);
  });

  it("no statement of a whole pass and feed walks a table: each is asked for its plan with its own parameters", async () => {
    await sweep(env); // targets sealed: the search for one in clear (a whole-table read by design) is not made again
    const now = Date.now();
    await lostJob("shard-500", now - CHANGES_MARGIN_MS / 2); // a new job the feed repairs
    await lostChange("shard-501", now - 86_400_000, now - CHANGES_MARGIN_MS / 2); // a change it repairs
    const tombstone = await lostJob("shard-502", now - 86_400_000);
    await updateJob(env.DB, tombstone.id, { deleted: true }, now - 86_400_000); // its shard never held it: purged
    await env.DB.prepare("UPDATE sweep_state SET pass_shard = '', pass_after = ''").run();
    const statements = new Map<string, unknown[]>();
    for (let n = 0; ; n++) {
      expect(n, "the pass completes").toBeLessThan(20);
      const metered = meteredEnv();
      const report = await sweep(metered.env);
      for (const [i, sql] of metered.spent.queries.entries()) statements.set(sql, metered.spent.params[i]!);
      if (report.passCompleted) break;
    }
    const kinds = [...statements.keys()].join("\n");
    for (const made of ["FROM shard_tenants", "WHERE id > ?1", "version > 1", "DELETE FROM jobs", "SELECT * FROM jobs WHERE id IN"]) {
      expect(kinds, made).toContain(made);
    }
    const walks: Array<{ sql: string; plan: string[] }> = [];
    for (const [sql, params] of statements) {
      const steps = await plan(sql, ...params);
      if (steps.some((s) => /^SCAN (?!CONSTANT ROW)/.test(s) || /TEMP B-TREE FOR ORDER BY/.test(s))) walks.push({ sql, plan: steps });
    }
    expect(walks).toEqual([]);
  });
});

describe("the sweep, invocation by invocation", () => {
  it("a pass larger than one invocation's budget resumes where it stopped and repairs every shard", async () => {
    const old = Date.now() - 86_400_000; // behind the change feed: only the pass finds these
    const jobs = await Promise.all(Array.from({ length: 8 }, (_, i) => lostJob(`shard-${100 + i}`, old)));
    const budget = { d1Queries: 12, shardCalls: 6 };
    let invocations = 0;
    for (;;) {
      invocations++;
      expect(invocations).toBeLessThan(60);
      const metered = meteredEnv();
      const report = await sweep(metered.env, budget);
      expect(metered.spent.queries.length).toBeLessThanOrEqual(budget.d1Queries);
      expect(metered.spent.shardCalls.length).toBeLessThanOrEqual(budget.shardCalls);
      if (report.passCompleted) break;
    }
    expect(invocations).toBeGreaterThan(2);
    for (const job of jobs) expect(await held(job), job.id).toBe(true);
  });

  it("the pass calls a shard once per invocation for all its jobs, however they interleave with other shards' by id", async () => {
    // 3,000 tombstones, over three shards in turn, first by id: none of the shards holds them.
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < 3000)
       INSERT INTO jobs (id, tenant_id, name, shard, version, spec, paused, created_at, updated_at, deleted_at)
       SELECT printf('job_000000000grouped%03d', i), 'default', NULL, 'shard-' || (9001 + i % 3), 2, '{}', 0, 1, 1, 1 FROM n`,
    ).run();
    await env.DB.prepare("UPDATE sweep_state SET pass_shard = '~', pass_after = ''").run();
    const metered = meteredEnv();
    const report = await sweep(metered.env);
    expect(report.passCompleted).toBe(true);
    const compares = metered.spent.shardCalls.filter((c) => c.method === "compareJobs" && /^shard-900[123]$/.test(c.shard));
    expect(compares.map((c) => c.shard).sort()).toEqual(["shard-9001", "shard-9002", "shard-9003"]);
    expect(report.tombstonesPurged).toBeGreaterThan(0);
  });

  it("the change feed re-delivers a new job the pass has not reached, even one stamped before the last sweep", async () => {
    await sweep(env); // the feed is caught up
    // Created half a margin ago by an isolate whose write is only now visible.
    const job = await lostJob("shard-200", Date.now() - CHANGES_MARGIN_MS / 2);
    await passAtItsEnd();
    const report = await sweep(env);
    expect(report.jobsCompared).toBe(0);
    expect(report.changesCompared).toBeGreaterThan(0);
    expect(await held(job)).toBe(true);
  });

  it("the change feed re-delivers a change its shard missed, found through jobs_changed", async () => {
    await sweep(env);
    const job = await lostChange("shard-201", Date.now() - 86_400_000, Date.now() - CHANGES_MARGIN_MS / 2);
    expect(await held(job, 2)).toBe(false);
    await passAtItsEnd();
    const report = await sweep(env);
    expect(report.jobsCompared).toBe(0);
    expect(report.changesCompared).toBeGreaterThan(0);
    expect(await held(job, 2)).toBe(true);
  });

  it("the change feed moves past backlogs of new and changed jobs larger than its share of the budget", async () => {
    await sweep(env);
    const stamp = Date.now() - 10 * 60_000; // settled: older than the margin
    await env.DB.prepare("UPDATE sweep_state SET changes_at = ?, changes_id = '', created_after = ?")
      .bind(stamp - 1, firstIdAt(stamp - 1))
      .run();
    const created = await Promise.all(Array.from({ length: 6 }, (_, i) => lostJob(`shard-${300 + i}`, stamp)));
    const changed = await Promise.all(Array.from({ length: 6 }, (_, i) => lostChange(`shard-${310 + i}`, stamp - 86_400_000, stamp)));
    const budget = { d1Queries: 12, shardCalls: 6 };
    const cursors: string[] = [];
    const read = () =>
      env.DB.prepare("SELECT created_after, changes_at, changes_id FROM sweep_state").first<{
        created_after: string;
        changes_at: number;
        changes_id: string;
      }>();
    for (let n = 0; n < 12; n++) {
      await sweep(env, budget);
      const c = (await read())!;
      cursors.push(`${c.created_after} ${c.changes_at} ${c.changes_id}`);
      if (created.every((j) => c.created_after >= j.id) && changed.every((j) => c.changes_at > stamp || c.changes_id >= j.id)) break;
    }
    expect(new Set(cursors).size).toBe(cursors.length); // every invocation moved a cursor on
    for (const job of created) expect(await held(job), job.id).toBe(true);
    for (const job of changed) expect(await held(job, 2), job.id).toBe(true);
  });

  it("once no target in clear is left, later sweeps do not search for one", async () => {
    await sweep(env);
    const metered = meteredEnv();
    await sweep(metered.env);
    expect(metered.spent.queries.some((sql) => sql.includes("json_type"))).toBe(false);
    // While the flag is down, the search is made.
    await env.DB.prepare("UPDATE sweep_state SET targets_sealed = 0").run();
    const again = meteredEnv();
    await sweep(again.env);
    expect(again.spent.queries.some((sql) => sql.includes("json_type"))).toBe(true);
  });
});

describe("a shard whose calls throw", () => {
  afterEach(() => disarmFaults());

  const failures = async () => {
    const text = await (await api("/metrics")).text();
    return Number(/^edgecron_sweep_shard_failures_total (\d+)$/m.exec(text)?.[1] ?? Number.NaN);
  };

  it("is skipped and counted while the others are repaired and the sweep's place written; the next pass retries it", async () => {
    const old = Date.now() - 86_400_000; // behind the change feed: only the pass finds these
    const broken = await lostJob("shard-sweep-broken", old);
    const others = await Promise.all([lostJob("shard-sweep-fine-1", old), lostJob("shard-sweep-fine-2", old)]);
    const before = await failures();
    expect(before).toBeGreaterThanOrEqual(0);
    armFault("shard.sweepCall", Infinity, broken.shard);
    const start = (await env.DB.prepare("SELECT passes_completed FROM sweep_state").first<{ passes_completed: number }>())!;
    for (let n = 0; ; n++) {
      expect(n, "the pass completes").toBeLessThan(20);
      const report = await sweep(env);
      if (report.passesCompleted >= start.passes_completed + 2) break;
    }
    for (const job of others) expect(await held(job), job.id).toBe(true);
    expect(await failures()).toBeGreaterThan(before);
    disarmFaults();
    expect(await held(broken)).toBe(false);
    const after = (await env.DB.prepare("SELECT passes_completed FROM sweep_state").first<{ passes_completed: number }>())!;
    for (let n = 0; ; n++) {
      expect(n, "the next pass completes").toBeLessThan(20);
      if ((await sweep(env)).passesCompleted > after.passes_completed) break;
    }
    expect(await held(broken)).toBe(true);
  });
});
