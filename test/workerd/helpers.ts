import {
  createExecutionContext,
  createScheduledController,
  env,
  evictDurableObject,
  runDurableObjectAlarm,
  runInDurableObject,
  SELF,
  waitOnExecutionContext,
} from "cloudflare:test";
import { expect, vi } from "vitest";
import { insertJob } from "../../src/catalog/jobs";
import { armFault, disarmFault } from "../../src/faults";
import worker from "../../src/index";
import { DEFAULT_TENANT, newJobId } from "../../src/model/ids";
import { CreateJobSchema, type Job, type JobSpec, type StoredTarget } from "../../src/model/job";
import type { Run } from "../../src/model/run";
import type { JobDefinition } from "../../src/protocol/stored-rows";
import { sealTarget } from "../../src/security/targets";
import { MAX_REDISPATCHES } from "../../src/shard/leases";
import type { Shard } from "../../src/shard/shard";
import type { Hit } from "../support/hit";

/** The admin tokens vitest.config.ts gives the Worker: API_TOKEN, and API_TOKEN_NEXT being rotated in. */
export const TOKEN = "test-token-0123456789abcdef0123456789ab";
export const NEXT_TOKEN = "test-token-next-0123456789abcdef01234567";

export function api(path: string, init: RequestInit & { json?: unknown } = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (!headers.has("Authorization")) headers.set("Authorization", `Bearer ${TOKEN}`);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(init.json);
  }
  return SELF.fetch(`https://edgecron.test${path}`, { ...init, headers, body });
}

/** A new tenant (through the admin token) and a function that calls the API with its key. */
export async function createTenant(limits: Record<string, number | null> = {}) {
  const res = await api("/v1/tenants", { method: "POST", json: { name: `t-${crypto.randomUUID()}`, limits } });
  expect(res.status, await res.clone().text()).toBe(201);
  const tenant = (await res.json()) as { id: string; apiKey: string; keyId: string };
  const call = (path: string, init: RequestInit & { json?: unknown } = {}) =>
    api(path, { ...init, headers: { ...Object.fromEntries(new Headers(init.headers)), Authorization: `Bearer ${tenant.apiKey}` } });
  return { ...tenant, api: call };
}

/**
 * Creates a job; `breaker: false` unless the body says otherwise. Every test's target is on the
 * one receiver origin, so the default tenant's circuit breaker (src/gate/breaker.ts) would open
 * on one test's deliberate failures and hold the runs of the tests after it. Breakers are tested
 * on their own (breakers.test.ts), each test with its own tenant.
 */
export async function createJob(body: Record<string, unknown>, as: typeof api = api): Promise<Job> {
  const res = await as("/v1/jobs", { method: "POST", json: { breaker: false, ...body } });
  expect(res.status, await res.clone().text()).toBe(201);
  return res.json();
}

/** A receiver URL unique to the caller, so tests never read each other's hits. */
export function receiverPath(name: string, query = ""): string {
  return `${env.RECEIVER_URL}/hit/${name}-${crypto.randomUUID()}${query ? `?${query}` : ""}`;
}

export async function hitsOf(targetUrl: string): Promise<Hit[]> {
  const name = new URL(targetUrl).pathname.split("/")[2];
  const res = await fetch(`${env.RECEIVER_URL}/log/${name}`);
  return res.json();
}

export function shardOf(job: Pick<Job, "shard">) {
  return env.SHARD.get(env.SHARD.idFromName(job.shard));
}

/** Runs a job's shard alarm now, leaving its fire times as they are. */
export async function runAlarmNow(job: Pick<Job, "shard">): Promise<void> {
  const stub = shardOf(job);
  await runAlarmOf(stub);
}

/** Makes a job's next fire due now and runs its shard's alarm: no waiting on the wall clock. */
export async function fireNow(job: Job): Promise<number> {
  const stub = shardOf(job);
  const due = Date.now() - 1;
  await runInDurableObject(stub, (_shard: Shard, state) => {
    state.storage.sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", due, job.id);
  });
  await runAlarmOf(stub);
  return due;
}

export async function getRun(runId: string): Promise<Run> {
  const res = await api(`/v1/runs/${runId}`);
  expect(res.status).toBe(200);
  return res.json();
}

export async function listRuns(jobId: string): Promise<Run[]> {
  const res = await api(`/v1/jobs/${jobId}/runs?limit=200`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { items: Run[] }).items;
}

/** Waits until the run reaches one of `states` (the queue consumer works asynchronously). */
export async function waitForRun(runId: string, states: Run["state"][], timeout = 15_000): Promise<Run> {
  return vi.waitFor(
    async () => {
      const run = await getRun(runId);
      if (!states.includes(run.state)) throw new Error(`run ${runId} is ${run.state}, waiting for ${states.join("|")}`);
      return run;
    },
    { timeout, interval: 100 },
  );
}

/**
 * Fires a job but holds its dispatch back (the Queue send fails once), so the run stays queued
 * and unclaimed until the test acts; the shard sends it by itself two seconds later. Without
 * this a test would race the real queue, which delivers at once.
 */
export async function fireHeld(job: Job): Promise<number> {
  // Every send while firing fails: the runtime may run the past-due alarm itself as well.
  armFault("shard.queueSend", Infinity, job.shard);
  try {
    const due = await fireNow(job);
    // The runtime may run the past-due alarm by itself, concurrently: wait until the shard has
    // made the run and, its send refused, re-armed for a retry, before lifting the fault.
    await vi.waitFor(
      async () => {
        const state = await runInDurableObject(shardOf(job), (_s: Shard, st) => ({
          runs: st.storage.sql.exec("SELECT COUNT(*) AS n FROM runs WHERE job_id = ? AND scheduled_at = ?", job.id, due).one().n as number,
          alarm: st.storage.getAlarm(),
        }));
        const alarm = await state.alarm;
        if (state.runs !== 1 || alarm === null || alarm < Date.now() + 500) throw new Error("the held fire is not settled yet");
      },
      { timeout: 5_000, interval: 20 },
    );
    return due;
  } finally {
    disarmFault("shard.queueSend", job.shard);
  }
}

/**
 * Fires the job so that its run's attempt is under way with no consumer to carry it out, as if
 * one had taken the dispatch and not yet reported: the send is refused, then the shard's object
 * is evicted, which loses the dispatch it kept in memory. The run stays `running` until the test
 * reports for it or its lease ends (makeRunDue, expireAttempt).
 */
export async function fireInFlight(job: Job): Promise<number> {
  const due = await fireHeld(job);
  await evictDurableObject(shardOf(job));
  return due;
}

/** Moves a run's due time to the past and runs the alarm, e.g. to end a retry wait now. */
export async function makeRunDue(job: Job, runId: string): Promise<void> {
  const stub = shardOf(job);
  const due = Date.now() - 1;
  await runInDurableObject(stub, (_shard: Shard, state) => {
    const sql = state.storage.sql;
    // A running run's lease ends now (src/shard/leases.ts: a row lists it for now); any other run's due time comes.
    sql.exec("UPDATE runs SET due_at = ?1 WHERE id = ?2 AND state != 'running'", due, runId);
    sql.exec("UPDATE runs SET lease_until = min(lease_until, ?1) WHERE id = ?2 AND state = 'running'", due, runId);
    sql.exec(
      "INSERT INTO leases (due_at, first_run, runs) SELECT ?1, id, json_array(json_array(id, fence)) FROM runs WHERE id = ?2 AND state = 'running' AND lease_until IS NOT NULL ON CONFLICT DO NOTHING",
      due,
      runId,
    );
  });
  await runAlarmOf(stub);
}

/**
 * A run's attempt, whose dispatch never reaches a consumer (the queue refuses every send of its
 * shard meanwhile), has its lease end again and again: sent again each time under the same
 * fence, MAX_REDISPATCHES times, then the attempt times out. Returns the run's row as the
 * shard then holds it.
 */
export async function expireAttempt(job: Job, runId: string): Promise<Record<string, SqlStorageValue>> {
  const rowOf = () =>
    runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT state, fence, redispatches FROM runs WHERE id = ?", runId).one(),
    );
  const start = await rowOf();
  armFault("shard.queueSend", Infinity, job.shard);
  try {
    for (let i = Number(start.redispatches); i <= MAX_REDISPATCHES; i++) {
      await makeRunDue(job, runId);
      // The runtime may run the past-due alarm itself, concurrently: wait for the shard to have moved.
      await vi.waitFor(
        async () => {
          const row = await rowOf();
          if (row.state === "running" && row.fence === start.fence && Number(row.redispatches) <= i)
            throw new Error(`redispatched ${row.redispatches} times`);
        },
        { timeout: 5_000, interval: 20 },
      );
    }
    return await rowOf();
  } finally {
    disarmFault("shard.queueSend", job.shard);
  }
}

/**
 * Runs the shard's alarm now, to its end. It is set an hour ahead first, not in the past: the
 * runtime starts a past-due alarm by itself, and `runDurableObjectAlarm` would then find none
 * and return while that one is still under way, so the test would read the shard before the
 * alarm's work (seen under load).
 */
async function runAlarmOf(stub: DurableObjectStub<Shard>): Promise<void> {
  await runInDurableObject(stub, (_shard: Shard, state) => state.storage.setAlarm(Date.now() + 3_600_000));
  await runDurableObjectAlarm(stub);
}

/** A cron that will not fire during a test on its own: 00:00 on January 1st. */
export const FAR_CRON = { cron: "0 0 1 1 *" };

/** One invocation of the cron trigger, as production makes it every minute. */
export async function runCron(): Promise<void> {
  const ctx = createExecutionContext();
  await (worker as ExportedHandler<Env>).scheduled!(createScheduledController({ cron: "* * * * *" }), env, ctx);
  await waitOnExecutionContext(ctx);
}

/**
 * Runs the cron trigger until a whole consistency pass, from its first shard to its last, has
 * run since the call: what one sweep did when it swept everything every minute. A pass already
 * under way is finished first (it visited some shards before the caller's change).
 */
export async function sweepFully(maxInvocations = 50): Promise<number> {
  const read = () =>
    env.DB.prepare("SELECT pass_shard, passes_completed FROM sweep_state").first<{ pass_shard: string; passes_completed: number }>();
  const start = (await read())!;
  const target = start.passes_completed + (start.pass_shard === "" ? 1 : 2);
  for (let n = 1; n <= maxInvocations; n++) {
    await runCron();
    if ((await read())!.passes_completed >= target) return n;
  }
  throw new Error(`the sweep did not complete a pass in ${maxInvocations} invocations`);
}

/** A job in the catalog whose shard call was lost, last changed at `updatedAt`. */
export async function lostJob(shard: string, updatedAt: number) {
  const id = newJobId(updatedAt);
  const { target, steps: _steps, ...spec } = CreateJobSchema.parse({ schedule: FAR_CRON, target: { url: receiverPath("sweep-lost") } });
  const sealed = { ...spec, target: await sealTarget(env.ENCRYPTION_KEYS, target!, id) };
  await insertJob(env.DB, {
    id,
    tenantId: DEFAULT_TENANT,
    name: null,
    shard,
    version: 1,
    spec: sealed,
    paused: false,
    pausedReason: null,
    createdAt: updatedAt,
    updatedAt,
    deletedAt: null,
  });
  return { id, shard };
}

/**
 * The spec the API stored for a job, with `schedule`: for definitions applied straight to a
 * shard of a test's own (`definition`), many jobs to one spec. Its target is in the form a job
 * stored before sealing has (URL and method in clear, which every release still opens): the
 * API's sealed one is bound to the template job's id, and would open under no other.
 */
export async function specLike(schedule: JobSpec["schedule"], url = receiverPath("spec")): Promise<JobSpec> {
  const template = await createJob({ schedule: FAR_CRON, target: { url } });
  const spec = await runInDurableObject(shardOf(template), (_s: Shard, state) =>
    JSON.parse(state.storage.sql.exec("SELECT spec FROM jobs WHERE id = ?", template.id).one().spec as string),
  );
  return { ...spec, schedule, target: { url, method: "POST" } as unknown as StoredTarget };
}

/** A new job's definition, as the API hands it to its shard. */
export function definition(spec: JobSpec, now: number): JobDefinition {
  return { id: newJobId(now), tenantId: "default", version: 1, spec, paused: false, deleted: false, createdAt: now };
}

/**
 * Makes the shard's retention pass due and runs its alarm; returns the pass's bookkeeping after.
 * The runtime may run the past-due alarm itself, and `runDurableObjectAlarm` then finds none:
 * the pass is over when it has moved its next time past the one set here (in the same
 * transaction as its removals).
 */
export async function runRetention(stub: DurableObjectStub<Shard>): Promise<{ nextAt: number; cursor: string | null }> {
  const due = Date.now() - 1;
  await runInDurableObject(stub, async (_s: Shard, state) => {
    state.storage.sql.exec("UPDATE meta SET value = ? WHERE key = 'retention_next_at'", String(due));
    await state.storage.setAlarm(due);
  });
  await runDurableObjectAlarm(stub);
  return vi.waitFor(
    () =>
      runInDurableObject(stub, (_s: Shard, state) => {
        const meta = (key: string) =>
          state.storage.sql.exec("SELECT value FROM meta WHERE key = ?", key).toArray()[0]?.value as string | undefined;
        const nextAt = Number(meta("retention_next_at"));
        if (nextAt <= due) throw new Error("the retention pass has not finished");
        return { nextAt, cursor: meta("retention_cursor") ?? null };
      }),
    { timeout: 10_000, interval: 20 },
  );
}

/** The most [start, end] spans open at one instant: how many attempts overlapped. */
export function maxOverlap(spans: Array<[number, number]>): number {
  const edges = spans.flatMap(([a, b]) => [[a, 1] as const, [b, -1] as const]).sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let open = 0;
  let most = 0;
  for (const [, step] of edges) {
    open += step;
    most = Math.max(most, open);
  }
  return most;
}
