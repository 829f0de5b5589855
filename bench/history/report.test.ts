import { env, runInDurableObject } from "cloudflare:test";
import { expect, it } from "vitest";
import type { JobSpec } from "../../src/model/job";
import type { Outcome } from "../../src/protocol/queue-messages";
import type { Shard } from "../../src/shard/shard";
import { seedHistory } from "../../test/support/seed-history";

/**
 * `npm run bench:history`: what one report of 100 runs' outcomes costs in time on an empty
 * shard and on one holding a million finished runs of the same job (and their attempts). The
 * hot path reads what it returns, never the history, so the two should be close. Figures only:
 * the machine is shared, so nothing here asserts a duration.
 */

const BATCH = 100;
const ROUNDS = 7;
const HISTORY = Number(env.BENCH_HISTORY_RUNS);

const spec = {
  schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
  target: { url: "http://127.0.0.1:9/never", method: "POST", headerNames: [] },
  timeoutMs: 30_000,
  retry: { maxAttempts: 3, backoff: { initialMs: 1_000, maxMs: 300_000, factor: 2 }, jitter: "full" },
} as unknown as JobSpec;

async function measure(history: number): Promise<{ reportMs: number[]; seedMs: number }> {
  const name = `history-bench-${crypto.randomUUID()}`;
  const stub = env.SHARD.get(env.SHARD.idFromName(name));
  const jobId = "job_bench";
  await stub.applyJobs([{ id: jobId, tenantId: "default", version: 1, spec, paused: false, deleted: false, createdAt: Date.now() }]);
  const seedMs = await runInDurableObject(stub, (_s: Shard, state) => {
    const started = Date.now();
    if (history > 0) seedHistory(state.storage.sql, jobId, history);
    return Date.now() - started;
  });
  const reportMs: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const ids = Array.from({ length: BATCH }, (_, i) => `run_bench_${round}_${i}`);
    await runInDurableObject(stub, (_s: Shard, state) => {
      const now = Date.now();
      for (const id of ids) {
        // Dispatched, as the shard makes them: the attempt began with the dispatch (src/shard/ledger.ts).
        state.storage.sql.exec(
          `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, created_at, lease_until, started_at,
             a_number, a_fence, a_started_at, a_outcome, a_token)
           VALUES (?, ?, 1, 'manual', ?, 'running', 1, 1, ?, ?, ?, 1, 1, ?, 'running', ?)`,
          id,
          jobId,
          now,
          now,
          now + 120_000,
          now,
          now,
          `tok_${id}`,
        );
      }
    });
    const outcomes: Outcome[] = ids.map((runId) => ({ runId, fence: 1, ok: true, status: 200, error: null }));
    const t = performance.now();
    const recorded = await stub.report(outcomes);
    reportMs.push(performance.now() - t);
    expect(recorded.every((r) => r === "recorded")).toBe(true);
  }
  return { reportMs, seedMs };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

it(`report of ${BATCH} runs: empty shard vs ${HISTORY.toLocaleString("en")} finished runs`, async () => {
  const empty = await measure(0);
  const full = await measure(HISTORY);
  const summary = {
    batch: BATCH,
    rounds: ROUNDS,
    history: HISTORY,
    seedMs: full.seedMs,
    emptyMs: { report: median(empty.reportMs) },
    historyMs: { report: median(full.reportMs) },
  };
  console.log(`history bench: ${JSON.stringify(summary)}`);
  expect(summary.historyMs.report).toBeGreaterThan(0);
}, 600_000);
