import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { armFault, disarmFault, disarmFaults, faultCounts } from "../../src/faults";
import { scheduledRunId, stepRunId } from "../../src/model/ids";
import type { Run } from "../../src/model/run";
import { MAX_CALLS_PER_ATTEMPT, MAX_REDISPATCHES } from "../../src/shard/leases";
import type { Shard } from "../../src/shard/shard";
import {
  api,
  createJob,
  definition,
  FAR_CRON,
  fireInFlight,
  fireNow,
  getRun,
  hitsOf,
  makeRunDue,
  receiverPath,
  shardOf,
  specLike,
  waitForRun,
} from "./helpers";

/**
 * Leases by row (src/shard/leases.ts): runs one alarm dispatches together, their leases ending in
 * the same second, share a row of `leases` instead of an entry each in `runs_due`. What must
 * hold: a dispatch lost among them is sent again when the row comes due.
 */

type Row = Record<string, SqlStorageValue>;

const rows = (shard: DurableObjectStub<Shard>, query: string, ...bindings: SqlStorageValue[]) =>
  runInDurableObject(shard, (_s: Shard, state) => state.storage.sql.exec(query, ...bindings).toArray() as Row[]);

describe("leases by row", () => {
  afterEach(() => disarmFaults());

  // Its waits (the runtime's alarm, up to 10 s; the runs, up to 20 s) add up to the default timeout.
  it("runs fired together share one lease row; dispatches lost with the shard's memory are sent again when it comes due", {
    timeout: 60_000,
  }, async () => {
    const name = "shard-900201";
    const shard = env.SHARD.get(env.SHARD.idFromName(name));
    const url = receiverPath("chunk-lost");
    // Hourly jobs whose fires were missed (made 2.5 h ago, unapplied since): the most recent
    // missed fire of each is caught up (misfire fire_once), all in one alarm.
    const startAt = Date.now() - 2.5 * 3_600_000;
    const spec = await specLike({ every: "1h", startAt: new Date(startAt).toISOString() }, url);
    const jobs = Array.from({ length: 5 }, () => definition(spec, startAt));
    const runIds = jobs.map((j) => scheduledRunId(j.id, startAt + 2 * 3_600_000));

    // The alarm commits the fires, then dies before sending; the shard is evicted, and the
    // dispatches it kept in memory with it (docs/architecture.md, invariant 3).
    const faults = faultCounts.get("shard.afterCommit") ?? 0;
    armFault("shard.afterCommit", 1, name);
    await shard.applyJobs(jobs);
    // The runtime runs the alarm at once by itself; evicted at once, before it retries the alarm 2 s later.
    await vi.waitFor(() => expect(faultCounts.get("shard.afterCommit")).toBe(faults + 1), { timeout: 10_000, interval: 10 });
    await evictDurableObject(shard);

    const leases = await rows(shard, "SELECT * FROM leases");
    expect(leases).toHaveLength(1);
    expect(JSON.parse(leases[0]!.runs as string).sort()).toEqual(runIds.map((id) => [id, 1]).sort());
    // Dispatched, their attempts begun: nothing but the lease row looks at them again.
    const leased = await rows(shard, "SELECT state, due_at, a_outcome FROM runs");
    expect(leased).toEqual(Array(5).fill({ state: "running", due_at: null, a_outcome: "running" }));

    // The leases end (made due here rather than waited for).
    await rows(shard, "UPDATE leases SET due_at = ?1", Date.now() - 1);
    await rows(shard, "UPDATE runs SET lease_until = ?1", Date.now() - 1);
    await runDurableObjectAlarm(shard);
    await vi.waitFor(
      async () => {
        const runs = await rows(shard, "SELECT state, redispatches FROM runs");
        expect(runs.map((r) => r.state)).toEqual(Array(5).fill("succeeded"));
        expect(runs.every((r) => r.redispatches === 1)).toBe(true);
      },
      { timeout: 20_000, interval: 100 },
    );
    // What the row listed was looked at: the rows left are the resent dispatches' leases, ahead.
    const left = await rows(shard, "SELECT due_at FROM leases");
    expect(left.every((r) => Number(r.due_at) > Date.now())).toBe(true);
  });

  it("a lost dispatch of a workflow step a PATCH removed ends that step's run cancelled, and its workflow run goes on", async () => {
    const gone = receiverPath("wf-gone");
    const kept = receiverPath("wf-kept");
    const job = await createJob({
      schedule: FAR_CRON,
      steps: [
        { id: "gone", target: { url: gone } },
        { id: "kept", after: ["gone"], target: { url: kept } },
      ],
    });
    // The step's dispatch never reaches the queue, and is lost with the shard's memory.
    armFault("shard.queueSend", Infinity, job.shard);
    const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
    expect(res.status, await res.clone().text()).toBe(202);
    const started = (await res.json()) as Run;
    const stepId = stepRunId(started.id, "gone");
    await vi.waitFor(
      async () => expect((await rows(shardOf(job), "SELECT state FROM runs WHERE id = ?", stepId))[0]?.state).toBe("running"),
      {
        timeout: 5_000,
        interval: 20,
      },
    );
    await evictDurableObject(shardOf(job));
    const patched = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { steps: [{ id: "kept", target: { url: kept } }] } });
    expect(patched.status, await patched.clone().text()).toBe(200);
    disarmFault("shard.queueSend", job.shard);

    // Its lease ends: there is nothing to send again.
    await makeRunDue(job, stepId);
    const [step] = await rows(shardOf(job), "SELECT state, error, a_outcome FROM runs WHERE id = ?", stepId);
    expect(step).toMatchObject({ state: "cancelled", a_outcome: "cancelled" });
    expect(String(step!.error)).toMatch(/step was removed/);
    const run = await waitForRun(started.id, ["succeeded", "failed", "cancelled"]);
    expect(run.state).toBe("succeeded");
    expect(await hitsOf(kept)).toHaveLength(1);
    expect(await hitsOf(gone)).toHaveLength(0);
  });

  it("a dead-lettered dispatch of a job paused meanwhile is not sent again: its run ends cancelled", async () => {
    const url = receiverPath("abandon-paused");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    const runId = scheduledRunId(job.id, await fireInFlight(job));
    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(200);
    expect((await getRun(runId)).state).toBe("running"); // an attempt under way is left to finish

    expect(await shardOf(job).abandonDispatches([{ runId, fence: 1 }])).toEqual(["ended"]);
    const run = await getRun(runId);
    expect(run.state).toBe("cancelled");
    expect(run.error).toMatch(/dead-lettered.*not retried: job paused/);
    const [row] = await rows(shardOf(job), "SELECT redispatches, a_outcome FROM runs WHERE id = ?", runId);
    expect(row).toEqual({ redispatches: 0, a_outcome: "timed_out" });
  });

  // The worst path of docs/guarantees.md ("Target calls per attempt"): every delivery of every
  // copy calls the target, then the consumer dies before it reports, so the Queue delivers the
  // message until it dead-letters it, and each dead letter sends the dispatch again.
  it("a dispatch whose every delivery dies after calling its target is sent again MAX_REDISPATCHES times, then its attempt ends: calls within the bound", {
    timeout: 180_000,
  }, async () => {
    const url = receiverPath("poison");
    const job = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 1 } });
    armFault("consumer.beforeReport", Infinity, job.shard);
    const runId = scheduledRunId(job.id, await fireNow(job));
    const run = await waitForRun(runId, ["succeeded", "failed", "dead", "cancelled"], 170_000);
    disarmFaults();
    expect(run.state).toBe("dead");
    expect(run.error).toMatch(/not sent again after 5 resends/);
    const [row] = await rows(shardOf(job), "SELECT redispatches, attempt, a_outcome FROM runs WHERE id = ?", runId);
    expect(row).toEqual({ redispatches: MAX_REDISPATCHES, attempt: 1, a_outcome: "timed_out" });
    const calls = (await hitsOf(url)).length;
    console.log(`poison dispatch: ${calls} target calls for one attempt (bound ${MAX_CALLS_PER_ATTEMPT})`);
    expect(calls).toBeGreaterThan(MAX_REDISPATCHES); // every copy was delivered and called
    expect(calls).toBeLessThanOrEqual(MAX_CALLS_PER_ATTEMPT);
  });
});
