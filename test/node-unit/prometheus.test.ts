import parse from "parse-prometheus-text-format";
import { describe, expect, it } from "vitest";
import type { MetricsSnapshot } from "../../src/app/metrics-snapshot";
import { renderExposition } from "../../src/app/prometheus";
import { type AdminFigures, FIRE_LAG_BUCKETS, schedulerSeries } from "../../src/app/prometheus-series";
import type { SweepState } from "../../src/catalog/sweep-state";
import { closedBreaker } from "../../src/gate/breaker";
import { RUN_STATES } from "../../src/model/run-states";
import { ALARM_LAG_BOUNDS_MS, countLag, noLags } from "../../src/protocol/alarm-lag";
import { countFireLag, FIRE_LAG_BOUNDS_MS, noTotals } from "../../src/protocol/totals";

describe("renderExposition", () => {
  it("HELP and TYPE before the samples, labels escaped, one line each", () => {
    const text = renderExposition([
      { name: "x_total", help: 'a \\ help\nline with "quotes"', type: "counter", samples: [{ value: 3 }] },
      { name: "y", help: "y", type: "gauge", samples: [{ labels: { path: 'C:\\dir "a"\nb' }, value: 1.5 }, { value: Infinity }] },
    ]);
    expect(text).toBe(
      [
        '# HELP x_total a \\\\ help\\nline with "quotes"',
        "# TYPE x_total counter",
        "x_total 3",
        "# HELP y y",
        "# TYPE y gauge",
        'y{path="C:\\\\dir \\"a\\"\\nb"} 1.5',
        "y +Inf",
        "",
      ].join("\n"),
    );
    // A real parser reads back what was meant.
    const [x, y] = parse(text);
    expect(x).toMatchObject({ name: "x_total", type: "COUNTER", help: 'a \\ help\nline with "quotes"', metrics: [{ value: "3" }] });
    expect(y!.metrics[0]).toEqual({ labels: { path: 'C:\\dir "a"\nb' }, value: "1.5" });
  });

  it("a histogram's buckets are cumulative, end at +Inf, with sum and count", () => {
    const text = renderExposition([
      { name: "lag_seconds", help: "h", type: "histogram", buckets: [0.1, 1, 10], observations: [0.05, 0.1, 0.5, 3, 20] },
    ]);
    const [family] = parse(text);
    expect(family).toMatchObject({ type: "HISTOGRAM" });
    expect(family!.metrics[0]).toEqual({
      buckets: { "0.1": "2", "1": "3", "10": "4", "+Inf": "5" },
      sum: String(0.05 + 0.1 + 0.5 + 3 + 20),
      count: "5",
    });
  });

  it("a histogram bucketed where it was measured renders as the same observations would", () => {
    const bounds = [0.1, 1, 10];
    const observations = [0.05, 0.1, 0.5, 3, 20, 30];
    const fromObservations = renderExposition([{ name: "lag_seconds", help: "h", type: "histogram", buckets: bounds, observations }]);
    // Per bucket, not cumulative: 2 at most 0.1, 1 in (0.1, 1], 1 in (1, 10], 2 above 10.
    const sum = observations.reduce((s, x) => s + x, 0);
    const fromCounts = renderExposition([
      { name: "lag_seconds", help: "h", type: "histogram", buckets: bounds, counts: [2, 1, 1, 2], sum },
    ]);
    expect(fromCounts).toBe(fromObservations);
    expect(parse(fromCounts)[0]!.metrics[0]).toEqual({
      buckets: { "0.1": "2", "1": "3", "10": "4", "+Inf": "6" },
      sum: String(sum),
      count: "6",
    });
  });

  it("refuses counts that do not match the bounds and +Inf", () => {
    expect(() => renderExposition([{ name: "l", help: "h", type: "histogram", buckets: [1, 2], counts: [1, 2], sum: 3 }])).toThrow(
      /2 counts for 2 bounds/,
    );
  });

  it("refuses a repeated name, an invalid name or label: a scraper would reject the whole page", () => {
    const g = (name: string, labels?: Record<string, string>) => ({
      name,
      help: "h",
      type: "gauge" as const,
      samples: [{ labels, value: 1 }],
    });
    expect(() => renderExposition([g("a"), g("a")])).toThrow(/repeated/);
    expect(() => renderExposition([g("a-b")])).toThrow(/bad or repeated metric name/);
    expect(() => renderExposition([g("a", { "bad-label": "x" })])).toThrow(/bad label name/);
    expect(() => renderExposition([g("a", { __reserved: "x" })])).toThrow(/bad label name/);
  });
});

describe("schedulerSeries", () => {
  const alarmLag = noLags();
  for (const ms of [4, 80, 400_000]) countLag(alarmLag, ms);
  const totals = noTotals();
  totals.runsFinished = { succeeded: 40, dead: 2 };
  totals.attempts = { succeeded: 40, failed: 5, timed_out: 1 };
  for (const ms of [30, 700, 20_000]) countFireLag(totals.fireLag, ms);
  countLag(totals.alarmLag, 7);
  Object.assign(totals, { dispatches: 47, redispatches: 1, retries: 4, queueDeadLetters: 1, starts: 9 });
  const snapshot: MetricsSnapshot = {
    windowMs: 900_000,
    shards: 2,
    runsByState: { succeeded: 4, queued: 1 },
    attemptsByOutcome: { succeeded: 4, failed: 1 },
    lagsMs: [40, 120, 2_000],
    outbox: 1,
    awaitingClaim: 1,
    oldestAwaitingClaimMs: 1_500,
    shardCosts: [],
    shardStarts: 3,
    alarmLag,
    archive: { failingShards: 1, consecutiveFailures: 4, nextRetryAt: 1_700_000_000_000 },
    breakers: [
      { ...closedBreaker("https://down.example"), state: "open", failures: 5, openedAt: 1, retryAt: 2, held: 7 },
      { ...closedBreaker("https://flaky.example"), failures: 2, firstFailureAt: 1 },
    ],
    breakerTransitions: { open: 2, half_open: 1 },
    totals,
  };
  const sweep: SweepState = {
    changes: { at: 0, id: "" },
    created: "",
    pass: { shard: "shard-1", after: "", startedAt: 1_700_000_000_000, completed: 12 },
    targetsSealed: true,
    reseal: { under: null, after: "", remaining: 42 },
    auditAfter: "",
    schedulesAfter: "",
    last: { startedAt: 1_700_000_060_000, durationMs: 1_250, repairs: { feed_job: 2, due_work: 1 }, failedShards: 1 },
    shardFailures: 3,
  };
  const cost = {
    usd: 0.25,
    shardOperations: { alarm: { calls: 7 } },
    workerOperations: { sweep: { calls: 3 } },
  } as unknown as AdminFigures["cost"];
  const signInRefusals = { invalid: 12, throttled: 980 };
  const families = (admin: boolean) => parse(renderExposition(schedulerSeries(snapshot, admin ? { cost, sweep, signInRefusals } : null)));
  const sampleOf = (fs: ReturnType<typeof families>, name: string, labels?: Record<string, string>) =>
    fs.find((f) => f.name === name)?.metrics.find((m) => JSON.stringify(m.labels ?? {}) === JSON.stringify(labels ?? {}))?.value;

  it("breakers: each listed origin's state, and the runs it held", () => {
    const fs = families(false);
    expect(sampleOf(fs, "edgecron_breaker_state", { origin: "https://down.example", state: "open" })).toBe("1");
    expect(sampleOf(fs, "edgecron_breaker_state", { origin: "https://flaky.example", state: "closed" })).toBe("1");
    expect(sampleOf(fs, "edgecron_breaker_held_runs", { origin: "https://down.example" })).toBe("7");
  });

  it("every run state and final outcome is a series, 0 when none", () => {
    const fs = families(false);
    const runs = fs.find((f) => f.name === "edgecron_runs")!;
    expect(runs.metrics.map((m) => m.labels?.state)).toEqual([...RUN_STATES]);
    expect(sampleOf(fs, "edgecron_runs", { state: "succeeded" })).toBe("4");
    expect(sampleOf(fs, "edgecron_runs", { state: "dead" })).toBe("0");
    expect(sampleOf(fs, "edgecron_attempts_ended", { outcome: "failed" })).toBe("1");
    expect(sampleOf(fs, "edgecron_attempts_ended", { outcome: "timed_out" })).toBe("0");
  });

  it("lags in seconds into fixed buckets; ages in seconds; the window in HELP", () => {
    const fs = families(false);
    const lag = fs.find((f) => f.name === "edgecron_fire_lag_window_seconds")!;
    expect(lag.help).toContain("in the last 15m");
    // The parser keys buckets by bound, in an object: integer-like keys come first, hence the sets.
    expect(new Set(Object.keys(lag.metrics[0]!.buckets!))).toEqual(new Set([...FIRE_LAG_BUCKETS.map(String), "+Inf"]));
    expect(lag.metrics[0]).toMatchObject({ count: "3", sum: String(0.04 + 0.12 + 2) });
    expect(lag.metrics[0]!.buckets).toMatchObject({ "0.05": "1", "0.1": "1", "0.25": "2", "1": "2", "2.5": "3" });
    expect(sampleOf(fs, "edgecron_oldest_awaiting_claim_seconds")).toBe("1.5");
    expect(sampleOf(fs, "edgecron_metrics_window_seconds")).toBe("900");
  });

  it("the scheduler-wide figures only for the admin", () => {
    const adminOnly = [
      "edgecron_dispatch_outbox",
      "edgecron_archive_failing_shards",
      "edgecron_archive_consecutive_failures",
      "edgecron_shard_starts",
      "edgecron_alarm_lag_window_seconds",
      "edgecron_shard_calls",
      "edgecron_worker_invocations",
      "edgecron_cost_usd",
      "edgecron_sweep_passes_completed_total",
      "edgecron_sweep_pass_started_timestamp_seconds",
      "edgecron_sweep_last_started_timestamp_seconds",
      "edgecron_sweep_duration_seconds",
      "edgecron_sweep_repairs",
      "edgecron_sweep_failed_shards",
      "edgecron_sweep_shard_failures_total",
      "edgecron_targets_sealed_under_old_keys",
      "edgecron_sign_in_refusals_total",
    ];
    const tenantNames = families(false).map((f) => f.name);
    for (const name of adminOnly) expect(tenantNames).not.toContain(name);
    const fs = families(true);
    expect(fs.map((f) => f.name)).toEqual(expect.arrayContaining(adminOnly));
    expect(sampleOf(fs, "edgecron_shard_calls", { operation: "alarm" })).toBe("7");
    expect(sampleOf(fs, "edgecron_shard_starts")).toBe("3");
    expect(sampleOf(fs, "edgecron_archive_failing_shards")).toBe("1");
    expect(sampleOf(fs, "edgecron_archive_consecutive_failures")).toBe("4");
    const alarm = fs.find((f) => f.name === "edgecron_alarm_lag_window_seconds")!;
    expect(alarm.type).toBe("HISTOGRAM");
    expect(new Set(Object.keys(alarm.metrics[0]!.buckets!))).toEqual(
      new Set([...ALARM_LAG_BOUNDS_MS.map((ms) => String(ms / 1000)), "+Inf"]),
    );
    // Cumulative in the exposition, from counts per bucket: 4 ms, 80 ms, and one past every bound.
    expect(alarm.metrics[0]).toMatchObject({ count: "3", sum: String((4 + 80 + 400_000) / 1000) });
    expect(alarm.metrics[0]!.buckets).toMatchObject({ "0.01": "1", "0.05": "1", "0.1": "2", "300": "2", "+Inf": "3" });
    expect(sampleOf(fs, "edgecron_sweep_passes_completed_total")).toBe("12");
    expect(sampleOf(fs, "edgecron_targets_sealed_under_old_keys")).toBe("42");
    expect(sampleOf(fs, "edgecron_sign_in_refusals_total", { reason: "invalid" })).toBe("12");
    expect(sampleOf(fs, "edgecron_sign_in_refusals_total", { reason: "throttled" })).toBe("980");
    expect(fs.find((f) => f.name === "edgecron_sweep_passes_completed_total")?.type).toBe("COUNTER");
    expect(sampleOf(fs, "edgecron_sweep_pass_started_timestamp_seconds")).toBe("1700000000");
    expect(sampleOf(fs, "edgecron_sweep_last_started_timestamp_seconds")).toBe("1700000060");
    expect(sampleOf(fs, "edgecron_sweep_duration_seconds")).toBe("1.25");
    // Every kind, 0 when the invocation repaired none of it.
    const repairs = fs.find((f) => f.name === "edgecron_sweep_repairs")!;
    expect(repairs.type).toBe("GAUGE");
    expect(repairs.metrics.map((m) => [m.labels!.kind, m.value])).toEqual([
      ["feed_job", "2"],
      ["pass_job", "0"],
      ["due_work", "1"],
    ]);
  });

  it("the shards' totals as counters and cumulative histograms, for the admin only; breaker transitions for the tenant too", () => {
    const counters = [
      "edgecron_runs_finished_total",
      "edgecron_attempts_total",
      "edgecron_fire_lag_seconds",
      "edgecron_alarm_lag_seconds",
      "edgecron_dispatches_total",
      "edgecron_redispatches_total",
      "edgecron_retries_total",
      "edgecron_dead_letters_total",
      "edgecron_queue_dead_letters_total",
      "edgecron_shard_starts_total",
    ];
    const tenant = families(false);
    for (const name of counters) expect(tenant.map((f) => f.name)).not.toContain(name);
    expect(sampleOf(tenant, "edgecron_breaker_transitions_total", { to: "open" })).toBe("2");
    expect(sampleOf(tenant, "edgecron_breaker_transitions_total", { to: "closed" })).toBe("0");

    const fs = families(true);
    for (const name of counters) {
      const f = fs.find((x) => x.name === name);
      expect(f?.type, name).toBe(name.endsWith("_seconds") ? "HISTOGRAM" : "COUNTER");
    }
    expect(sampleOf(fs, "edgecron_runs_finished_total", { outcome: "succeeded" })).toBe("40");
    expect(sampleOf(fs, "edgecron_runs_finished_total", { outcome: "cancelled" })).toBe("0");
    expect(sampleOf(fs, "edgecron_attempts_total", { outcome: "timed_out" })).toBe("1");
    expect(sampleOf(fs, "edgecron_dead_letters_total", { state: "dead" })).toBe("2");
    expect(sampleOf(fs, "edgecron_dead_letters_total", { state: "failed" })).toBe("0");
    expect(fs.find((f) => f.name === "edgecron_dead_letters_total")!.metrics).toHaveLength(2);
    expect(sampleOf(fs, "edgecron_dispatches_total")).toBe("47");
    expect(sampleOf(fs, "edgecron_retries_total")).toBe("4");
    expect(sampleOf(fs, "edgecron_shard_starts_total")).toBe("9");
    const fire = fs.find((f) => f.name === "edgecron_fire_lag_seconds")!;
    expect(new Set(Object.keys(fire.metrics[0]!.buckets!))).toEqual(
      new Set([...FIRE_LAG_BOUNDS_MS.map((ms) => String(ms / 1000)), "+Inf"]),
    );
    expect(fire.metrics[0]).toMatchObject({ count: "3", sum: String((30 + 700 + 20_000) / 1000) });
    expect(fire.metrics[0]!.buckets).toMatchObject({ "0.05": "1", "0.5": "1", "1": "2", "10": "2", "30": "3", "+Inf": "3" });
    expect(fs.find((f) => f.name === "edgecron_alarm_lag_seconds")!.metrics[0]).toMatchObject({ count: "1", sum: "0.007" });
  });

  it("before an invocation recorded them: no last-invocation series rather than made-up zeros", () => {
    const names = parse(renderExposition(schedulerSeries(snapshot, { cost, sweep: { ...sweep, last: null }, signInRefusals }))).map(
      (f) => f.name,
    );
    expect(names).toContain("edgecron_sweep_passes_completed_total");
    for (const name of ["edgecron_sweep_last_started_timestamp_seconds", "edgecron_sweep_duration_seconds", "edgecron_sweep_repairs"]) {
      expect(names).not.toContain(name);
    }
  });

  it("no pass under way: no start time rather than a made-up one", () => {
    const idle = { ...sweep, pass: { ...sweep.pass, startedAt: null } };
    const names = parse(renderExposition(schedulerSeries(snapshot, { cost, sweep: idle, signInRefusals }))).map((f) => f.name);
    expect(names).toContain("edgecron_sweep_passes_completed_total");
    expect(names).not.toContain("edgecron_sweep_pass_started_timestamp_seconds");
  });
});
