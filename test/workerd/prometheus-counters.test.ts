import { evictDurableObject } from "cloudflare:test";
import parse, { type ParsedFamily } from "parse-prometheus-text-format";
import { describe, expect, it } from "vitest";
import type { Run } from "../../src/model/run";
import { api, createJob, createTenant, FAR_CRON, fireNow, listRuns, receiverPath, shardOf, waitForRun } from "./helpers";

/**
 * The counters and cumulative histograms of GET /metrics (src/app/prometheus-counters.ts): kept
 * by each shard in its storage (src/shard/counters.ts), so a restarted shard carries on from
 * where it was, and N more runs add exactly N, which is what rate() relies on.
 */

async function scrape(as: typeof api = api): Promise<ParsedFamily[]> {
  const res = await as("/metrics?window=1h");
  expect(res.status, await res.clone().text()).toBe(200);
  return parse(await res.text());
}

/** A counter's sample, or a histogram's count (`count`) or a bucket (`le`), as a number. */
function read(fs: ParsedFamily[], name: string, labels: Record<string, string> = {}, part?: { le: string } | "count"): number {
  const f = fs.find((x) => x.name === name);
  expect(f, `${name} is exposed`).toBeDefined();
  const m = f!.metrics.find((x) => JSON.stringify(x.labels ?? {}) === JSON.stringify(labels));
  expect(m, `${name}${JSON.stringify(labels)} is exposed`).toBeDefined();
  if (part === "count") return Number(m!.count);
  if (part) return Number(m!.buckets![part.le]);
  return Number(m!.value);
}

/** The figures this file follows, from one scrape. */
const figures = (fs: ParsedFamily[]) => ({
  succeeded: read(fs, "edgecron_runs_finished_total", { outcome: "succeeded" }),
  dead: read(fs, "edgecron_runs_finished_total", { outcome: "dead" }),
  attemptsSucceeded: read(fs, "edgecron_attempts_total", { outcome: "succeeded" }),
  attemptsFailed: read(fs, "edgecron_attempts_total", { outcome: "failed" }),
  dispatches: read(fs, "edgecron_dispatches_total"),
  retries: read(fs, "edgecron_retries_total"),
  deadLetters: read(fs, "edgecron_dead_letters_total", { state: "dead" }),
  fireLags: read(fs, "edgecron_fire_lag_seconds", {}, "count"),
  fireLagsInf: read(fs, "edgecron_fire_lag_seconds", {}, { le: "+Inf" }),
  starts: read(fs, "edgecron_shard_starts_total"),
});

async function runOnce(job: Awaited<ReturnType<typeof createJob>>, state: Run["state"]): Promise<void> {
  const before = new Set((await listRuns(job.id)).map((r) => r.id));
  await fireNow(job);
  const run = (await listRuns(job.id)).find((r) => !before.has(r.id));
  expect(run, "the fire made a run").toBeDefined();
  await waitForRun(run!.id, [state]);
}

describe("GET /metrics counters", () => {
  it("survive a shard restart, and N more runs add exactly N", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("ctr-ok") } });
    await runOnce(job, "succeeded");
    const stub = shardOf(job);
    const before = figures(await scrape());
    expect(before.succeeded).toBeGreaterThanOrEqual(1);
    expect(before.fireLags).toBeGreaterThanOrEqual(1);

    // The object goes, its memory with it; its storage stays. The next call starts a new one.
    await evictDurableObject(stub);
    const restarted = figures(await scrape());
    expect(restarted).toEqual({ ...before, starts: before.starts + 1 });
    expect((await stub.metrics(3_600_000)).totals.runsFinished.succeeded).toBe(1);

    const N = 3;
    for (let i = 0; i < N; i++) await runOnce(job, "succeeded");
    const after = figures(await scrape());
    expect(after).toEqual({
      ...restarted,
      succeeded: restarted.succeeded + N,
      attemptsSucceeded: restarted.attemptsSucceeded + N,
      dispatches: restarted.dispatches + N,
      fireLags: restarted.fireLags + N,
      fireLagsInf: restarted.fireLagsInf + N,
    });
  });

  it("a run that fails, is retried and goes dead: a retry, two failed attempts, a dead letter", async () => {
    const retry = { maxAttempts: 2, jitter: "none", backoff: { initialMs: 100, maxMs: 100 } };
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("ctr-dead", "status=500") }, retry });
    const before = figures(await scrape());
    await runOnce(job, "dead");
    const after = figures(await scrape());
    expect(after).toEqual({
      ...before,
      dead: before.dead + 1,
      attemptsFailed: before.attemptsFailed + 2,
      dispatches: before.dispatches + 2,
      retries: before.retries + 1,
      deadLetters: before.deadLetters + 1,
      fireLags: before.fireLags + 1,
      fireLagsInf: before.fireLagsInf + 1,
    });
  });

  it("breaker transitions: the tenant's gate counts its breaker opening, and a tenant key sees it", async () => {
    const tenant = await createTenant();
    // Two endpoints of the origin answer 503: the origin is down for more than one job.
    const jobs = await Promise.all(
      ["ctr-breaker-a", "ctr-breaker-b"].map((name) =>
        createJob(
          { schedule: FAR_CRON, target: { url: receiverPath(name, "status=503") }, retry: { maxAttempts: 1 }, breaker: true },
          tenant.api,
        ),
      ),
    );
    const transitions = async () => {
      const fs = await scrape(tenant.api);
      return Object.fromEntries(["open", "half_open", "closed"].map((to) => [to, read(fs, "edgecron_breaker_transitions_total", { to })]));
    };
    expect(await transitions()).toEqual({ open: 0, half_open: 0, closed: 0 });
    // Five failures in a row of both jobs open it (src/gate/breaker.ts).
    for (let i = 0; i < 5; i++) await runOnce(jobs[i % 2]!, "dead");
    expect(await transitions()).toEqual({ open: 1, half_open: 0, closed: 0 });
    // The tenant's counters of runs are the shards', not shown to a tenant key.
    expect((await scrape(tenant.api)).map((f) => f.name)).not.toContain("edgecron_runs_finished_total");
  });

  it("every histogram's buckets are cumulative and end in its count", async () => {
    const fs = await scrape();
    for (const name of ["edgecron_fire_lag_seconds", "edgecron_alarm_lag_seconds"]) {
      const m = fs.find((f) => f.name === name)!.metrics[0]!;
      const bounds = Object.keys(m.buckets!).sort((a, b) => Number(a === "+Inf" ? Infinity : a) - Number(b === "+Inf" ? Infinity : b));
      const counts = bounds.map((le) => Number(m.buckets![le]));
      expect(counts, name).toEqual([...counts].sort((a, b) => a - b));
      expect(counts.at(-1), name).toBe(Number(m.count));
    }
  });
});
