import { evictDurableObject, runDurableObjectAlarm, runInDurableObject, SELF } from "cloudflare:test";
import parse, { type ParsedFamily } from "parse-prometheus-text-format";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { FINAL_ATTEMPT_OUTCOMES } from "../../src/model/attempt-states";
import { RUN_STATES } from "../../src/model/run-states";
import { ALARM_LAG_BOUNDS_MS } from "../../src/protocol/alarm-lag";
import { CHANGES_MARGIN_MS } from "../../src/reconcile/changes";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, createTenant, FAR_CRON, fireNow, listRuns, lostJob, receiverPath, runCron, shardOf, waitForRun } from "./helpers";

type Call = typeof api;

/** Scrapes GET /metrics as `as`, checks the response is the text format, and parses it with a real parser. */
async function scrape(as: Call): Promise<ParsedFamily[]> {
  const res = await as("/metrics?window=1h");
  expect(res.status, await res.clone().text()).toBe(200);
  expect(res.headers.get("Content-Type")).toBe("text/plain; version=0.0.4; charset=utf-8");
  return parse(await res.text());
}

const family = (families: ParsedFamily[], name: string) => {
  const f = families.find((x) => x.name === name);
  expect(f, `${name} is exposed`).toBeDefined();
  return f!;
};

const value = (families: ParsedFamily[], name: string, labels: Record<string, string> = {}) => {
  const m = family(families, name).metrics.find((x) => JSON.stringify(x.labels ?? {}) === JSON.stringify(labels));
  expect(m, `${name}${JSON.stringify(labels)} is exposed`).toBeDefined();
  return Number(m!.value);
};

const ADMIN_ONLY = [
  "edgecron_dispatch_outbox",
  "edgecron_archive_failing_shards",
  "edgecron_shard_starts",
  "edgecron_alarm_lag_seconds",
  "edgecron_alarm_lag_window_seconds",
  "edgecron_runs_finished_total",
  "edgecron_attempts_total",
  "edgecron_fire_lag_seconds",
  "edgecron_dispatches_total",
  "edgecron_retries_total",
  "edgecron_dead_letters_total",
  "edgecron_shard_starts_total",
  "edgecron_shard_calls",
  "edgecron_worker_invocations",
  "edgecron_cost_usd",
  "edgecron_sweep_passes_completed_total",
  "edgecron_sweep_last_started_timestamp_seconds",
  "edgecron_sweep_duration_seconds",
  "edgecron_sweep_repairs",
  "edgecron_sweep_failed_shards",
  "edgecron_sweep_shard_failures_total",
];

/** A job of `as` that has run once, to success or failure. */
async function ranOnce(as: Call, name: string, query: string, state: "succeeded" | "failed") {
  const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath(name, query) } }, as);
  await fireNow(job);
  await waitForRun((await listRuns(job.id))[0]!.id, [state]);
  return job;
}

describe("GET /metrics (Prometheus)", () => {
  let ok: Awaited<ReturnType<typeof createTenant>>;
  let bad: Awaited<ReturnType<typeof createTenant>>;

  // Two tenants with a real run each, through the receiver: one succeeds, one fails for good.
  beforeAll(async () => {
    [ok, bad] = await Promise.all([createTenant(), createTenant()]);
    await ranOnce(ok.api, "prom-ok", "", "succeeded");
    await ranOnce(bad.api, "prom-bad", "status=400", "failed");
  });

  it("the admin sees every family, typed, with the documented label sets", async () => {
    const fs = await scrape(api);
    for (const f of fs) {
      expect(f.name).toMatch(/^edgecron_/);
      expect(f.help, f.name).not.toBe("");
    }
    expect(family(fs, "edgecron_runs").type).toBe("GAUGE");
    expect(family(fs, "edgecron_runs").metrics.map((m) => Object.keys(m.labels ?? {}))).toEqual(RUN_STATES.map(() => ["state"]));
    expect(family(fs, "edgecron_runs").metrics.map((m) => m.labels!.state)).toEqual([...RUN_STATES]);
    expect(family(fs, "edgecron_attempts_ended").metrics.map((m) => m.labels!.outcome)).toEqual(
      expect.arrayContaining([...FINAL_ATTEMPT_OUTCOMES]),
    );
    expect(value(fs, "edgecron_runs", { state: "succeeded" })).toBeGreaterThanOrEqual(1);
    expect(value(fs, "edgecron_runs", { state: "failed" })).toBeGreaterThanOrEqual(1);
    expect(value(fs, "edgecron_metrics_window_seconds")).toBe(3_600);

    // The window's histogram, recomputed at each scrape (the cumulative one: prometheus-counters.test.ts).
    const lag = family(fs, "edgecron_fire_lag_window_seconds");
    expect(lag.type).toBe("HISTOGRAM");
    expect(Number(lag.metrics[0]!.count)).toBeGreaterThanOrEqual(2);
    expect(lag.metrics[0]!.buckets!["+Inf"]).toBe(lag.metrics[0]!.count);
    expect(lag.help).toContain("in the last 1h");

    for (const name of [
      "edgecron_queue_depth",
      "edgecron_oldest_awaiting_claim_seconds",
      "edgecron_dispatch_outbox",
      "edgecron_cost_usd",
    ]) {
      expect(family(fs, name).type, name).toBe("GAUGE");
    }
    expect(family(fs, "edgecron_sweep_passes_completed_total").type).toBe("COUNTER");
    // The runs above were reported: each report is a shard call (there is no claim).
    expect(value(fs, "edgecron_shard_calls", { operation: "report" })).toBeGreaterThanOrEqual(1);
    expect(family(fs, "edgecron_shard_calls").metrics.every((m) => Object.keys(m.labels ?? {}).join() === "operation")).toBe(true);
    expect(value(fs, "edgecron_worker_invocations", { operation: "POST /v1/jobs" })).toBeGreaterThanOrEqual(2);
  });

  it("a tenant key sees its own runs only, and none of the scheduler-wide series", async () => {
    const mine = await scrape(ok.api);
    expect(value(mine, "edgecron_runs", { state: "succeeded" })).toBe(1);
    expect(value(mine, "edgecron_runs", { state: "failed" })).toBe(0);
    expect(value(mine, "edgecron_attempts_ended", { outcome: "succeeded" })).toBe(1);
    expect(value(mine, "edgecron_attempts_ended", { outcome: "failed" })).toBe(0);
    expect(value(mine, "edgecron_shards")).toBe(1);
    expect(family(mine, "edgecron_fire_lag_window_seconds").metrics[0]!.count).toBe("1");
    const names = mine.map((f) => f.name);
    for (const name of ADMIN_ONLY) expect(names).not.toContain(name);

    const theirs = await scrape(bad.api);
    expect(value(theirs, "edgecron_runs", { state: "failed" })).toBe(1);
    expect(value(theirs, "edgecron_runs", { state: "succeeded" })).toBe(0);
  });

  it("shard starts: one when a shard is created, one more each time it is evicted and woken", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("prom-starts") } });
    const stub = shardOf(job);
    const startsOf = async () => (await stub.metrics(3_600_000)).durableObject.starts;
    // SHARD_COUNT is large: the job's shard is new to this file, created by POST /v1/jobs.
    expect(await startsOf()).toBe(1);
    expect(await startsOf()).toBe(1);
    const before = value(await scrape(api), "edgecron_shard_starts");
    await evictDurableObject(stub);
    expect(await startsOf()).toBe(2);
    expect(value(await scrape(api), "edgecron_shard_starts")).toBeGreaterThanOrEqual(before + 1);
  });

  it("alarm lag: an alarm that came late is counted late, by the shard that set it", async () => {
    // Due 2 s after creation, so that the shard's alarm for it is still set when the test moves it (on a loaded machine a creation can take a second).
    const job = await createJob({
      schedule: { at: new Date(Date.now() + 2_000).toISOString() },
      target: { url: receiverPath("prom-late") },
    });
    const stub = shardOf(job);
    // The runtime's alarms come on time here, so this one is made late: the alarm the shard set
    // for the fire is moved an hour away, and 1.2 s after its time the harness runs the handler
    // itself. The harness gives alarm() no scheduled time: the shard's own is used (alarm-lag.ts).
    const at = await runInDurableObject(stub, async (_s: Shard, state) => {
      const set = await state.storage.getAlarm();
      await state.storage.setAlarm(Date.now() + 3_600_000);
      return set;
    });
    expect(at).not.toBeNull();
    await new Promise((resolve) => setTimeout(resolve, at! + 1_200 - Date.now()));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    await waitForRun((await listRuns(job.id))[0]!.id, ["succeeded"]);
    const lag = (await stub.metrics(3_600_000)).durableObject.alarmLag;
    expect(lag.counts.reduce((n, c) => n + c, 0)).toBe(1);
    expect(lag.sumMs).toBeGreaterThanOrEqual(1_200);
    expect(lag.counts.slice(0, ALARM_LAG_BOUNDS_MS.indexOf(1_000) + 1).every((c) => c === 0)).toBe(true);
    const scraped = family(await scrape(api), "edgecron_alarm_lag_seconds");
    expect(scraped.type).toBe("HISTOGRAM");
    expect(Number(scraped.metrics[0]!.count)).toBeGreaterThanOrEqual(1);
    expect(Number(scraped.metrics[0]!.sum)).toBeGreaterThanOrEqual(1.2);
  });

  it("alarm lag: the runtime's own alarm, set for a time already past, is not late for the time before it was set", async () => {
    // Due two minutes ago: the shard sets its alarm for then, and the runtime runs it at once
    // (workerd hands alarm() the time it was set as the scheduled time; the shard would too).
    const job = await createJob({
      schedule: { at: new Date(Date.now() - 120_000).toISOString() },
      target: { url: receiverPath("prom-overdue") },
    });
    const stub = shardOf(job);
    const lag = await vi.waitFor(
      async () => {
        const { alarmLag } = (await stub.metrics(3_600_000)).durableObject;
        expect(alarmLag.counts.reduce((n, c) => n + c, 0)).toBe(1);
        return alarmLag;
      },
      { timeout: 10_000, interval: 100 },
    );
    expect(lag.sumMs).toBeGreaterThanOrEqual(0);
    expect(lag.sumMs).toBeLessThan(60_000);
  });

  it("the sweep's last invocation: when it started, how long it took, what it repaired by kind", async () => {
    const started = Date.now();
    // A job whose shard call was lost after its D1 write: the change feed hands it to its shard.
    await lostJob("shard-prom-sweep", Date.now() - CHANGES_MARGIN_MS / 2);
    await runCron();
    let fs = await scrape(api);
    expect(value(fs, "edgecron_sweep_repairs", { kind: "feed_job" })).toBe(1);
    expect(value(fs, "edgecron_sweep_repairs", { kind: "pass_job" })).toBe(0);
    expect(family(fs, "edgecron_sweep_repairs").metrics.map((m) => m.labels!.kind)).toEqual(["feed_job", "pass_job", "due_work"]);
    const at = value(fs, "edgecron_sweep_last_started_timestamp_seconds");
    expect(at).toBeGreaterThanOrEqual(started / 1000);
    expect(at).toBeLessThanOrEqual(Date.now() / 1000);
    // It read and wrote D1 and called shards: some time passed, and less than the time since it started.
    const took = value(fs, "edgecron_sweep_duration_seconds");
    expect(took).toBeGreaterThan(0);
    expect(took).toBeLessThanOrEqual(Date.now() / 1000 - at);

    // A shard whose alarm was lost while work was due: the pass runs the work itself.
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("prom-sweep-due") } });
    await runInDurableObject(shardOf(job), async (_s: Shard, state) => {
      state.storage.sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", Date.now() - 1, job.id);
      await state.storage.deleteAlarm();
    });
    for (let n = 0; (await listRuns(job.id)).length === 0; n++) {
      expect(n, "the pass reached the shard").toBeLessThan(10);
      await runCron();
    }
    fs = await scrape(api);
    // Of the last invocation only: the feed's repair was an earlier one's.
    expect(value(fs, "edgecron_sweep_repairs", { kind: "due_work" })).toBeGreaterThanOrEqual(1);
    expect(value(fs, "edgecron_sweep_repairs", { kind: "feed_job" })).toBe(0);
    expect(value(fs, "edgecron_sweep_last_started_timestamp_seconds")).toBeGreaterThan(at);

    const names = (await scrape(ok.api)).map((f) => f.name);
    for (const name of ADMIN_ONLY) expect(names).not.toContain(name);
  });

  it.each([
    ["no token", undefined],
    ["a wrong token", "Bearer nope"],
  ])("%s → 401 JSON", async (_, authorization) => {
    const res = await SELF.fetch("https://edgecron.test/metrics", { headers: authorization ? { Authorization: authorization } : {} });
    expect(res.status).toBe(401);
    expect(res.headers.get("Content-Type")).toMatch(/^application\/json/);
    expect(await res.json()).toMatchObject({ error: { code: "unauthorized" } });
  });

  it("a bad window → 400 JSON naming it", async () => {
    const res = await api("/metrics?window=2d");
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { issues: [{ path: "window" }] } });
  });

  it("is in the OpenAPI document, as text, behind the bearer token", async () => {
    const doc = (await (await SELF.fetch("https://edgecron.test/openapi.json")).json()) as {
      paths: Record<string, { get?: { security?: unknown; responses: Record<string, { content?: Record<string, unknown> }> } }>;
    };
    const get = doc.paths["/metrics"]?.get;
    // Behind a key with the read scope (src/api/route-scopes.ts).
    expect(get?.security).toEqual([{ bearer: ["read"] }]);
    expect(Object.keys(get?.responses["200"]?.content ?? {})).toEqual(["text/plain; version=0.0.4; charset=utf-8"]);
  });
});
