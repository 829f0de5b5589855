import { SWEEP_REPAIR_KINDS, type SweepState } from "../catalog/sweep-state";
import { FINAL_ATTEMPT_OUTCOMES } from "../model/attempt-states";
import { RUN_STATES } from "../model/run-states";
import { ALARM_LAG_BOUNDS_MS } from "../protocol/alarm-lag";
import { FIRE_LAG_BOUNDS_MS } from "../protocol/totals";
import type { schedulerCost } from "./cost";
import type { MetricsSnapshot } from "./metrics-snapshot";
import type { Family, Sample } from "./prometheus";
import { breakerTransitionSeries, counterSeries } from "./prometheus-counters";

/**
 * What edgecron shows Prometheus at GET /metrics, from the figures GET /v1/metrics is made of.
 * Pure: a snapshot in, metric families out.
 *
 * Two kinds: the counters and cumulative histograms of prometheus-counters.ts (`_total`,
 * `edgecron_fire_lag_seconds`, `edgecron_alarm_lag_seconds`), which only grow and are for
 * rate(); and the gauges of "in the last <window>" (the window is said in each HELP and in
 * edgecron_metrics_window_seconds), counted over the shards' rows at each scrape: graph them as
 * they are, not through rate(). The `_window_seconds` histograms are of the window too:
 * histogram_quantile() over their buckets as scraped, no rate(). A tenant key sees only those
 * (and its breakers' transitions): the counters are kept per shard, not per tenant.
 */

/** Fire lag bucket bounds, in seconds: the shards' own (totals.ts), for the window's histogram too. */
export const FIRE_LAG_BUCKETS = FIRE_LAG_BOUNDS_MS.map((ms) => ms / 1000);

/** Figures that exist only for the whole scheduler, so only the admin token is shown them. */
export interface AdminFigures {
  cost: ReturnType<typeof schedulerCost>;
  sweep: SweepState;
  /** Sign-ins refused since the deployment began (src/api/sign-in-throttle.ts). */
  signInRefusals: Record<"invalid" | "throttled", number>;
}

export function schedulerSeries(m: MetricsSnapshot, admin: AdminFigures | null): Family[] {
  const last = `in the last ${durationText(m.windowMs)}`;
  const families: Family[] = [
    gauge("edgecron_metrics_window_seconds", "The window the windowed series cover (the window query parameter).", m.windowMs / 1000),
    gauge("edgecron_shards", "Shards holding jobs in the caller's scope.", m.shards),
    {
      name: "edgecron_runs",
      help: "Runs the shards hold now, by state (finished ones until retention archives them).",
      type: "gauge",
      samples: byLabel("state", RUN_STATES, m.runsByState),
    },
    {
      name: "edgecron_attempts_ended",
      help: `Attempts that ended ${last}, by outcome.`,
      type: "gauge",
      samples: byLabel("outcome", FINAL_ATTEMPT_OUTCOMES, m.attemptsByOutcome),
    },
    {
      name: "edgecron_fire_lag_window_seconds",
      help: `Scheduled instant to first dispatch (the attempt's start), on the shard's clock, of scheduled runs started ${last} (at most the 1000 latest per shard); recomputed at each scrape, not cumulative (edgecron_fire_lag_seconds is).`,
      type: "histogram",
      buckets: FIRE_LAG_BUCKETS,
      observations: m.lagsMs.map((ms) => ms / 1000),
    },
    gauge(
      "edgecron_queue_depth",
      "Runs dispatched and not yet reported by a consumer (their dispatch sent or still in the shard's outbox, or their target being called): the dispatch queues' depth as the shards see it.",
      m.awaitingClaim,
    ),
    gauge(
      "edgecron_oldest_awaiting_claim_seconds",
      "Age of the oldest run dispatched and not yet reported; 0 when none is.",
      m.oldestAwaitingClaimMs === null ? 0 : m.oldestAwaitingClaimMs / 1000,
    ),
    {
      name: "edgecron_breaker_state",
      help: "The caller's tenant's circuit breakers (the admin token: the default tenant's) that are open, half-open or counting failures: 1 for the state each origin's breaker is in. A breaker closed with no failure is not listed.",
      type: "gauge",
      samples: m.breakers.map((b) => ({ labels: { origin: b.origin, state: b.state }, value: 1 })),
    },
    {
      name: "edgecron_breaker_held_runs",
      help: "Runs each listed breaker has held (waiting, attempts unspent) since it last opened.",
      type: "gauge",
      samples: m.breakers.map((b) => ({ labels: { origin: b.origin }, value: b.held })),
    },
    breakerTransitionSeries(m.breakerTransitions),
  ];
  if (!admin) return families;
  families.push(
    ...counterSeries(m.totals),
    gauge(
      "edgecron_dispatch_outbox",
      "Dispatches committed but not yet handed to the Queue (their runs are in edgecron_queue_depth too); counted per shard, so shown to the admin token only.",
      m.outbox,
    ),
    gauge(
      "edgecron_archive_failing_shards",
      "Shards whose last write of expired runs to the R2 archive failed: those runs stay in the shard until a write succeeds; each shard retries after 5 s, doubling, at most every 10 min.",
      m.archive.failingShards,
    ),
    gauge(
      "edgecron_archive_consecutive_failures",
      "The most failed archive writes in a row of any shard; 0 when none is failing.",
      m.archive.consecutiveFailures,
    ),
    gauge(
      "edgecron_shard_starts",
      `Shard objects started ${last}: constructed, when created or again after an eviction, a restart or a deploy (each start makes a new single writer of its shard), as their cost meters counted them.`,
      m.shardStarts,
    ),
    {
      name: "edgecron_alarm_lag_window_seconds",
      help: `How late shard alarms started ${last}: from the time each was set for (or the time it was set, if later: work already due) to the start of the alarm handler, on the shard's clock; the runtime's retries of a failed alarm left out. Bucketed by the shards' meters; recomputed at each scrape, not cumulative (edgecron_alarm_lag_seconds is).`,
      type: "histogram",
      buckets: ALARM_LAG_BOUNDS_MS.map((ms) => ms / 1000),
      counts: m.alarmLag.counts,
      sum: m.alarmLag.sumMs / 1000,
    },
    {
      name: "edgecron_shard_calls",
      help: `Calls into shards ${last} by operation (an RPC method, or alarm), as their cost meters counted them (a shard evicted between meter writes loses up to 10 s of counts).`,
      type: "gauge",
      // `settle` is work after a call, charged apart, never a call of its own.
      samples: Object.entries(admin.cost.shardOperations)
        .filter(([, c]) => c.calls > 0)
        .map(([operation, c]) => ({ labels: { operation }, value: c.calls })),
    },
    {
      name: "edgecron_worker_invocations",
      help: `Worker invocations ${last} that read or wrote D1 or called a tenant gate, by entry point (an API route, queue, sweep): the Worker's cost meter records no others.`,
      type: "gauge",
      samples: Object.entries(admin.cost.workerOperations).map(([operation, c]) => ({ labels: { operation }, value: c.calls })),
    },
    gauge(
      "edgecron_cost_usd",
      `What the scheduler cost ${last} at edgecron's price table (the meters' own rows left out).`,
      admin.cost.usd,
    ),
    {
      name: "edgecron_sweep_passes_completed_total",
      help: "Consistency passes the reconciliation sweep has completed (every job compared with its shard, every shard's alarm re-asserted).",
      type: "counter",
      samples: [{ value: admin.sweep.pass.completed }],
    },
    {
      name: "edgecron_sweep_shard_failures_total",
      help: "Shards the reconciliation sweep skipped because a call to them threw (counted once per shard per invocation): the rest is repaired, and the next pass calls them again. A rising count names a shard to look at in the sweep's log.",
      type: "counter",
      samples: [{ value: admin.sweep.shardFailures }],
    },
    ...(admin.sweep.reseal.remaining === null
      ? []
      : [
          gauge(
            "edgecron_targets_sealed_under_old_keys",
            "Jobs, tenants and URL groups with a secret (a target, a notification URL, endpoints) still sealed under another key than ENCRYPTION_KEYS' first, or a URL in clear, when the sweep's re-seal last went through them all: 0 once a rotation's old key may be dropped.",
            admin.sweep.reseal.remaining,
          ),
        ]),
    {
      name: "edgecron_sign_in_refusals_total",
      help: "API requests refused for their credential: invalid (no credential, or a wrong one: 401), throttled (too many failed sign-ins from the client's address or for the key's prefix: 429).",
      type: "counter",
      samples: byLabel("reason", ["invalid", "throttled"] as const, admin.signInRefusals),
    },
  );
  const lastSweep = admin.sweep.last;
  // Absent until an invocation that records them has completed, rather than a made-up 0.
  if (lastSweep !== null) {
    families.push(
      gauge(
        "edgecron_sweep_last_started_timestamp_seconds",
        "When the last sweep invocation that completed started, in Unix seconds: time() minus it shows a cron trigger that stopped (or invocations that fail).",
        lastSweep.startedAt / 1000,
      ),
      gauge(
        "edgecron_sweep_duration_seconds",
        "How long the last sweep invocation that completed took, from its start to the write of its state (the Worker's clock moves at I/O only: D1 queries and shard calls).",
        lastSweep.durationMs / 1000,
      ),
      {
        name: "edgecron_sweep_repairs",
        help: "What the last sweep invocation that completed repaired, by kind: feed_job and pass_job, jobs handed back to a shard that lacked their latest version (a shard call lost after its D1 write), found by the change feed or by the consistency pass; due_work, shards whose due work the pass ran itself because their alarm had not (lost or late).",
        type: "gauge",
        samples: byLabel("kind", SWEEP_REPAIR_KINDS, lastSweep.repairs),
      },
      gauge(
        "edgecron_sweep_failed_shards",
        "Shards the last sweep invocation that completed skipped because a call to them threw.",
        lastSweep.failedShards,
      ),
    );
  }
  // Only while a pass is under way: time() minus it is how long the pass has taken so far.
  if (admin.sweep.pass.startedAt !== null) {
    families.push(
      gauge(
        "edgecron_sweep_pass_started_timestamp_seconds",
        "When the consistency pass under way started, in Unix seconds.",
        admin.sweep.pass.startedAt / 1000,
      ),
    );
  }
  return families;
}

const gauge = (name: string, help: string, value: number): Family => ({ name, help, type: "gauge", samples: [{ value }] });

/** One sample per known label value, 0 when absent, so that a series does not vanish while it is 0; unknown values too. */
function byLabel(label: string, known: readonly string[], counts: Record<string, number>): Sample[] {
  const values = [...known, ...Object.keys(counts).filter((k) => !known.includes(k))];
  return values.map((value) => ({ labels: { [label]: value }, value: counts[value] ?? 0 }));
}

/** "15m", "1h", "90s": the window as the query parameter would write it. */
function durationText(ms: number): string {
  for (const [unit, size] of [
    ["d", 86_400_000],
    ["h", 3_600_000],
    ["m", 60_000],
  ] as const) {
    if (ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms / 1000}s`;
}
