import { runInDurableObject, SELF } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Job } from "../../src/model/job";
import type { Shard } from "../../src/shard/shard";
import { seedHistory } from "../support/seed-history";
import { api, createJob, FAR_CRON, fireNow, getRun, hitsOf, listRuns, makeRunDue, receiverPath, shardOf, waitForRun } from "./helpers";

/**
 * The shard's cost per call must not grow with its history (a minute job holds ~525,000 runs
 * after a year). A shard seeded with a long history is driven through every hot-path call —
 * create, trigger, the alarm, admission, dispatch, report, 202 completion and heartbeat, retry,
 * pause and resume — by the real API, queue consumer and receiver. Every statement the shard
 * executes meanwhile is recorded (a spy on its own SQL handle), then each is asked for its
 * query plan with the same parameters: none may scan runs, attempts or jobs.
 */

const HISTORY_RUNS = 200_000;
const OTHER_JOBS = 20_000;

/**
 * Partial indexes that hold only runs that have not ended: walking one whole is proportional
 * to the work in hand, never to history. (runs_dead_letters, also partial, holds history.)
 */
const OPEN_RUN_INDEXES = ["runs_open", "runs_due", "runs_waiting", "runs_buffered"];
/**
 * The jobs that watch their runs' outcomes (pauseAfterFailures, notify), and the frequent jobs,
 * read whole once when a shard starts: proportional to those jobs, never to history, and not
 * read again per call.
 */
const ONCE_PER_START_INDEXES = ["jobs_watching_outcomes", "jobs_frequent"];

/**
 * A plan step that reads history: a walk of all of runs, attempts or jobs (the table, or an
 * index over all its rows), or a walk of one job's runs as a range of the runs' primary key
 * (`runKeyRange`), which holds every run the job keeps. Only a page of the job's runs (the
 * list, not a hot-path call: it reads what the job's retention cap keeps, never another job's)
 * may walk that range: a run carries no index entry for it (docs/cost.md).
 */
function readsHistory(query: string, step: string): boolean {
  const scan = /^SCAN (runs|attempts|jobs)\b(?: USING (?:COVERING )?INDEX (\w+))?/.exec(step);
  if (scan) return !(scan[2] !== undefined && [...OPEN_RUN_INDEXES, ...ONCE_PER_START_INDEXES].includes(scan[2]));
  const page = /ORDER BY scheduled_at DESC, id DESC LIMIT \?$/.test(query.trim());
  return /^SEARCH runs USING PRIMARY KEY \(id>\? AND id<\?\)/.test(step) && !page && !carriedFire(query);
}

/**
 * A recurring job's next fire carried by its latest run (fired-through.ts, `carriedBy`): the
 * range of the job's runs fired since its row's own fire, read from the newest end, where the
 * latest run carries it; a fire that does not carry one writes the row, which moves that bound.
 */
const carriedFire = (query: string) => /next_version = \? AND next_fire_at > \?\s+ORDER BY id DESC LIMIT 1$/.test(query.trim());

interface Executed {
  query: string;
  bindings: SqlStorageValue[];
}

const executed: Executed[] = [];
let job: Job;
let stopSpying: (() => Promise<void>) | undefined;

/** Finished runs of the job and their attempts, and other jobs, written in bulk straight into the shard. */
function seedShard(sql: SqlStorage, jobId: string): void {
  seedHistory(sql, jobId, HISTORY_RUNS);
  sql.exec(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
     INSERT INTO jobs (id, tenant_id, version, spec, paused, deleted, created_at, next_fire_at, next_due_at, fires)
     SELECT 'job_other_' || i, 'default', 1, '{}', 0, i % 2, 1, NULL, NULL, 1 FROM n`,
    OTHER_JOBS,
  );
}

function callback(runId: string, action: "complete" | "heartbeat", body: unknown): Promise<Response> {
  return SELF.fetch(`https://edgecron.test/v1/runs/${runId}/${action}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function patch(fields: Record<string, unknown>): Promise<void> {
  const res = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: fields });
  expect(res.status, await res.clone().text()).toBe(200);
}

async function trigger(): Promise<string> {
  const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
  expect(res.status, await res.clone().text()).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

describe(`hot path on a shard holding ${HISTORY_RUNS.toLocaleString("en")} finished runs`, () => {
  beforeAll(async () => {
    // maxConcurrency and overlap make every run pass admission and the overlap check.
    job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("plans") }, overlap: "forbid", maxConcurrency: 3 });
    stopSpying = await runInDurableObject(shardOf(job), (_s: Shard, state) => {
      const sql = state.storage.sql;
      seedShard(sql, job.id);
      const exec = sql.exec;
      // The shard's store holds this same handle: every statement it runs passes through here.
      sql.exec = ((query: string, ...bindings: SqlStorageValue[]) => {
        executed.push({ query, bindings });
        return exec.call(sql, query, ...bindings);
      }) as typeof sql.exec;
      return async () => {
        await runInDurableObject(shardOf(job), () => {
          sql.exec = exec;
        });
      };
    });
  });

  afterAll(async () => {
    await stopSpying?.();
  });

  it("runs a trigger, a scheduled fire, a 202 completion, a heartbeat, a retry, a pause and a resume", async () => {
    const triggered = await trigger();
    await waitForRun(triggered, ["succeeded"]);

    await fireNow(job);
    const scheduled = (await listRuns(job.id)).find((r) => r.trigger === "schedule" && !r.id.startsWith(`run_${job.id.slice(4)}_h`))!;
    await waitForRun(scheduled.id, ["succeeded"]);

    const longRunning = receiverPath("plans-202", "status=202");
    await patch({ target: { url: longRunning } });
    const accepted = await trigger();
    await expect.poll(async () => (await getRun(accepted)).attemptLog?.at(-1)?.outcome, { timeout: 15_000 }).toBe("accepted");
    const token = (await hitsOf(longRunning))[0]!.headers["x-edgecron-completion-token"]!;
    expect((await callback(accepted, "heartbeat", { token, extendMs: 60_000 })).status).toBe(200);
    expect((await callback(accepted, "complete", { token, ok: true })).status).toBe(200);

    await patch({ target: { url: receiverPath("plans-503", "status=503") }, retry: { maxAttempts: 2, backoff: { initialMs: 1_000 } } });
    const failing = await trigger();
    // Its retry comes 1 s later by itself, so on a busy machine the run may be dead already.
    if ((await waitForRun(failing, ["retry_wait", "dead"])).state === "retry_wait") await makeRunDue(job, failing);
    await waitForRun(failing, ["dead"]);
    expect((await api(`/v1/runs/${failing}/retry`, { method: "POST" })).status).toBe(202);

    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(200);
    expect((await api(`/v1/jobs/${job.id}/resume`, { method: "POST" })).status).toBe(200);

    // A frequent job: fired from memory a few times, then paused.
    const frequentUrl = receiverPath("plans-frequent");
    await patch({ schedule: { every: "1s" }, overlap: "allow", maxConcurrency: null, target: { url: frequentUrl } });
    const frequent = () =>
      runInDurableObject(shardOf(job), (_s: Shard, state) =>
        state.storage.sql.exec("SELECT frequent FROM jobs WHERE id = ?", job.id).one(),
      );
    await expect.poll(async () => (await frequent()).frequent, { timeout: 15_000 }).toBe(1);
    // Its fires counted at its target: its row is written at most once a minute (frequent-jobs.ts).
    const fired = (await hitsOf(frequentUrl)).length;
    await expect.poll(async () => (await hitsOf(frequentUrl)).length, { timeout: 15_000 }).toBeGreaterThan(fired + 1);
    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(200);
  });

  it("reads no history in any statement it ran: no scan of runs, attempts or jobs, no walk of a job's past runs", async () => {
    const distinct = new Map<string, Executed>();
    for (const e of executed) if (!distinct.has(e.query)) distinct.set(e.query, e);
    // The calls above reach every capability: dispatches and their leases, reports, admission, the alarm, completion.
    expect(distinct.size).toBeGreaterThan(25);
    const scans = await runInDurableObject(shardOf(job), (_s: Shard, state) => {
      const found: Array<{ query: string; plan: string[] }> = [];
      for (const { query, bindings } of distinct.values()) {
        if (!/^\s*(SELECT|UPDATE|DELETE|INSERT|WITH)/i.test(query)) continue;
        const plan = state.storage.sql
          .exec(`EXPLAIN QUERY PLAN ${query}`, ...bindings)
          .toArray()
          .map((row) => row.detail as string);
        if (plan.some((step) => readsHistory(query, step))) found.push({ query: query.replace(/\s+/g, " "), plan });
      }
      return found;
    });
    expect(scans).toEqual([]);
    // The job's next fire was looked for on its runs from its row's own fire on (a scheduled run id of the job).
    const carried = [...distinct.values()].filter((e) => carriedFire(e.query));
    expect(carried).toHaveLength(1);
    expect(carried[0]!.bindings[0]).toMatch(new RegExp(`^run_${job.id.slice(4)}_[0-9a-z]{8}$`));
  });
});
