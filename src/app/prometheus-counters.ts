import { FINAL_ATTEMPT_OUTCOMES } from "../model/attempt-states";
import { DEAD_LETTER_STATES, FINAL_STATES } from "../model/run-states";
import { ALARM_LAG_BOUNDS_MS } from "../protocol/alarm-lag";
import { FIRE_LAG_BOUNDS_MS, type ShardTotals } from "../protocol/totals";
import type { Family, Sample } from "./prometheus";

/**
 * The Prometheus counters and cumulative histograms of GET /metrics: what the shards have
 * counted since each was created (src/protocol/totals.ts), summed over them at the scrape. They
 * only grow, across shard restarts too (counters.ts), so `rate()`, `increase()` and
 * `histogram_quantile()` over `rate(..._bucket[5m])` mean what they do for any exporter. Of
 * whole shards, so shown to the admin token only, like the cost. Pure: totals in, families out.
 */
export function counterSeries(t: ShardTotals): Family[] {
  return [
    {
      name: "edgecron_runs_finished_total",
      help: "Runs that reached a final state, by it (a revived run counts again when it ends again; a workflow's steps are not runs of their own here).",
      type: "counter",
      samples: byLabel("outcome", FINAL_STATES, t.runsFinished),
    },
    {
      name: "edgecron_attempts_total",
      help: "Attempts that ended, by outcome (a workflow step's included).",
      type: "counter",
      samples: byLabel("outcome", FINAL_ATTEMPT_OUTCOMES, t.attempts),
    },
    {
      name: "edgecron_fire_lag_seconds",
      help: "Scheduled instant to first dispatch of scheduled runs, on the shard's clock, every such run counted: histogram_quantile() over rate() of its buckets.",
      type: "histogram",
      buckets: FIRE_LAG_BOUNDS_MS.map((ms) => ms / 1000),
      counts: t.fireLag.counts,
      sum: t.fireLag.sumMs / 1000,
    },
    {
      name: "edgecron_alarm_lag_seconds",
      help: "How late shard alarms started: from the time each was set for (or the time it was set, if later) to the start of the handler, on the shard's clock; the runtime's retries left out.",
      type: "histogram",
      buckets: ALARM_LAG_BOUNDS_MS.map((ms) => ms / 1000),
      counts: t.alarmLag.counts,
      sum: t.alarmLag.sumMs / 1000,
    },
    counter(
      "edgecron_dispatches_total",
      "Dispatches the shards made, each sent to a dispatch queue after its commit: a run's first, a retry's, a revival's, and every resend.",
      t.dispatches,
    ),
    counter(
      "edgecron_redispatches_total",
      "Dispatches sent again under the same fence because their lease ended with no outcome (docs/architecture.md, invariant 5).",
      t.redispatches,
    ),
    counter("edgecron_retries_total", "Attempts that failed and left their run waiting to be retried (retry_wait).", t.retries),
    {
      name: "edgecron_dead_letters_total",
      help: "Runs that went dead (attempts exhausted) or failed (not retryable): what GET /v1/dead-letters lists, each time a run entered it.",
      type: "counter",
      samples: byLabel("state", DEAD_LETTER_STATES, t.runsFinished, true),
    },
    counter(
      "edgecron_queue_dead_letters_total",
      "Dispatches a dispatch queue dead-lettered, which their shard sent again at once (no run is lost to it).",
      t.queueDeadLetters,
    ),
    counter(
      "edgecron_shard_starts_total",
      "Shard objects started: constructed when created, or again after an eviction, a restart or a deploy (the starts not yet written when an object went are lost).",
      t.starts,
    ),
  ];
}

/** The breaker transitions of the gate GET /metrics asks (the caller's tenant's; the admin's: the default tenant's). */
export function breakerTransitionSeries(transitions: Record<string, number>): Family {
  return {
    name: "edgecron_breaker_transitions_total",
    help: "Times a circuit breaker of the caller's tenant (the admin token: the default tenant's) moved to a state: open (failures in a row, or its probe failed), half_open (a probe went), closed (the probe succeeded).",
    type: "counter",
    samples: byLabel("to", ["open", "half_open", "closed"], transitions),
  };
}

const counter = (name: string, help: string, value: number): Family => ({ name, help, type: "counter", samples: [{ value }] });

/** One sample per known label value, 0 when absent, so a series exists before its first count; other values too, unless `only`. */
function byLabel(label: string, known: readonly string[], counts: Record<string, number>, only = false): Sample[] {
  const values = only ? [...known] : [...known, ...Object.keys(counts).filter((k) => !known.includes(k))];
  return values.map((value) => ({ labels: { [label]: value }, value: counts[value] ?? 0 }));
}
