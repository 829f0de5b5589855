import { evictDurableObject, SELF } from "cloudflare:test";
import parse, { type ParsedFamily } from "parse-prometheus-text-format";
import { beforeAll, describe, expect, it } from "vitest";
import { FINAL_ATTEMPT_OUTCOMES } from "../../src/shard/attempt-states";
import { RUN_STATES } from "../../src/shard/run-states";
import { api, createJob, createTenant, FAR_CRON, fireNow, listRuns, receiverPath, shardOf, waitForRun } from "./helpers";

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
  "edgecron_shard_starts",
  "edgecron_shard_calls",
  "edgecron_worker_invocations",
  "edgecron_cost_usd",
  "edgecron_sweep_passes_completed_total",
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

    const lag = family(fs, "edgecron_fire_lag_seconds");
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
    // The runs above were claimed: the alarm fired them and the claim is a shard call.
    expect(value(fs, "edgecron_shard_calls", { operation: "claim" })).toBeGreaterThanOrEqual(2);
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
    expect(family(mine, "edgecron_fire_lag_seconds").metrics[0]!.count).toBe("1");
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
    expect(get?.security).toEqual([{ bearer: [] }]);
    expect(Object.keys(get?.responses["200"]?.content ?? {})).toEqual(["text/plain; version=0.0.4; charset=utf-8"]);
  });
});
