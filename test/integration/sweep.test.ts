import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { CHANGED_SINCE_SQL } from "../../src/catalog/jobs";
import { CHANGES_MARGIN_MS } from "../../src/reconcile/changes";
import { sweep } from "../../src/reconcile/sweep";
import { lostJob, shardOf } from "./helpers";
import { meteredEnv } from "./metered-env";

const held = async (job: { id: string; shard: string }) =>
  (await shardOf(job).compareJobs([{ id: job.id, version: 1, deleted: false }])).stale.length === 0;

const plan = async (sql: string, ...params: unknown[]) =>
  (
    await env.DB.prepare(`EXPLAIN QUERY PLAN ${sql}`)
      .bind(...params)
      .all<{ detail: string }>()
  ).results.map((r) => r.detail);

describe("the sweep's queries", () => {
  it("the change feed seeks the updated_at index, and sorts nothing", async () => {
    const details = await plan(CHANGED_SINCE_SQL, 0, "", 10);
    expect(details.join("\n")).toMatch(/SEARCH jobs USING INDEX jobs_by_updated/);
    expect(details.join("\n")).not.toMatch(/TEMP B-TREE/);
  });

  it("the pass finds the next shard by one seek of the shard index", async () => {
    const details = await plan("SELECT MIN(shard) AS shard FROM jobs WHERE shard > ?", "shard-1");
    expect(details.join("\n")).toMatch(/SEARCH jobs USING COVERING INDEX jobs_by_shard/);
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
      expect(invocations).toBeLessThan(40);
      const metered = meteredEnv();
      const report = await sweep(metered.env, budget);
      expect(metered.spent.queries.length).toBeLessThanOrEqual(budget.d1Queries);
      expect(metered.spent.shardCalls.length).toBeLessThanOrEqual(budget.shardCalls);
      if (report.passCompleted) break;
    }
    expect(invocations).toBeGreaterThan(2);
    for (const job of jobs) expect(await held(job), job.id).toBe(true);
  });

  it("the change feed re-delivers a recent change the pass has not reached, even one stamped before the last sweep", async () => {
    await sweep(env); // the feed is caught up
    // Stamped half a margin ago by an isolate whose write is only now visible.
    const job = await lostJob("shard-200", Date.now() - CHANGES_MARGIN_MS / 2);
    // The pass has already compared this shard's jobs in the pass under way.
    await env.DB.prepare("UPDATE sweep_state SET pass_shard = ?, pass_after = '~'").bind(job.shard).run();
    const report = await sweep(env);
    expect(report.jobsCompared).toBe(0);
    expect(report.changesCompared).toBeGreaterThan(0);
    expect(await held(job)).toBe(true);
  });

  it("the change feed moves past a backlog larger than its share of the budget", async () => {
    await sweep(env);
    const stamp = Date.now() - 10 * 60_000; // settled: older than the margin
    await env.DB.prepare("UPDATE sweep_state SET changes_at = ?, changes_id = ''")
      .bind(stamp - 1)
      .run();
    const jobs = await Promise.all(Array.from({ length: 6 }, (_, i) => lostJob(`shard-${300 + i}`, stamp)));
    const budget = { d1Queries: 12, shardCalls: 6 };
    const cursors: string[] = [];
    for (let n = 0; n < 6; n++) {
      await sweep(env, budget);
      cursors.push((await env.DB.prepare("SELECT changes_id FROM sweep_state").first<{ changes_id: string }>())!.changes_id);
      if (jobs.every((j) => cursors.at(-1)! >= j.id)) break;
    }
    expect(new Set(cursors).size).toBe(cursors.length); // every invocation moved the cursor on
    for (const job of jobs) expect(await held(job), job.id).toBe(true);
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
