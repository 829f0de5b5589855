import type { Run } from "../../src/client/index.ts";

/**
 * What the job page's charts plot, from the runs it already loaded: fire lag (scheduled instant
 * to start) per run, and failed runs per time bucket. Pure, so it is tested without a browser.
 */

export interface LagPoint {
  at: number;
  lagMs: number;
  runId: string;
}

/** Runs that started, oldest first, with how late they started. */
export function fireLag(runs: Run[]): LagPoint[] {
  return runs
    .filter((run) => run.startedAt !== null)
    .map((run) => ({
      at: Date.parse(run.scheduledAt),
      lagMs: Math.max(0, Date.parse(run.startedAt!) - Date.parse(run.scheduledAt)),
      runId: run.id,
    }))
    .sort((a, b) => a.at - b.at);
}

export interface Bucket {
  start: number;
  finished: number;
  failed: number;
}

const FAILED = new Set<Run["state"]>(["failed", "dead"]);
const FINISHED = new Set<Run["state"]>(["succeeded", "failed", "dead", "cancelled"]);

/** Finished and failed runs per bucket of `bucketMs`, over the span the runs cover (at most `maxBuckets`). */
export function failuresOverTime(runs: Run[], maxBuckets = 24): Bucket[] {
  const done = runs.filter((run) => FINISHED.has(run.state));
  if (done.length === 0) return [];
  const times = done.map((run) => Date.parse(run.scheduledAt));
  const first = Math.min(...times);
  const span = Math.max(...times) - first;
  const bucketMs = niceBucket(span / maxBuckets);
  const start = Math.floor(first / bucketMs) * bucketMs;
  const count = Math.floor((Math.max(...times) - start) / bucketMs) + 1;
  const buckets: Bucket[] = Array.from({ length: count }, (_, i) => ({ start: start + i * bucketMs, finished: 0, failed: 0 }));
  for (const run of done) {
    const bucket = buckets[Math.floor((Date.parse(run.scheduledAt) - start) / bucketMs)]!;
    bucket.finished++;
    if (FAILED.has(run.state)) bucket.failed++;
  }
  return buckets;
}

const STEPS = [1_000, 5_000, 15_000, 60_000, 300_000, 900_000, 3_600_000, 6 * 3_600_000, 86_400_000, 7 * 86_400_000];

/** The smallest round bucket (1 s, 5 s … 1 week) at least `ms` long. */
export function niceBucket(ms: number): number {
  return STEPS.find((step) => step >= ms) ?? STEPS[STEPS.length - 1]!;
}
