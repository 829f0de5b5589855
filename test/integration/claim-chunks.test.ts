import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { armFault, disarmFaults, faultCounts } from "../../src/faults";
import { scheduledRunId } from "../../src/model/ids";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, definition, FAR_CRON, receiverPath, shardOf, specLike } from "./helpers";

/**
 * Claim deadlines by chunk (src/shard/claim-chunks.ts): runs one alarm dispatches together
 * share a row of `claim_chunks` instead of an entry each in `runs_due`. What must hold: a
 * dispatch lost among them is sent again when the chunk comes due; a pause finds a run that
 * waits in a chunk.
 */

type Row = Record<string, SqlStorageValue>;

const rows = (shard: DurableObjectStub<Shard>, query: string, ...bindings: SqlStorageValue[]) =>
  runInDurableObject(shard, (_s: Shard, state) => state.storage.sql.exec(query, ...bindings).toArray() as Row[]);

describe("claim deadlines by chunk", () => {
  afterEach(() => disarmFaults());

  // Its waits (the runtime's alarm, up to 10 s; the runs, up to 20 s) add up to the default timeout.
  it("runs fired together share one chunk; dispatches lost with the shard's memory are sent again when it comes due", {
    timeout: 60_000,
  }, async () => {
    const name = "shard-900201";
    const shard = env.SHARD.get(env.SHARD.idFromName(name));
    const url = receiverPath("chunk-lost");
    // Hourly jobs whose fires were missed (made 2.5 h ago, unapplied since): the most recent
    // missed fire of each is caught up (misfire fire_once). A fire's run whose claim deadline is
    // the entry that fired it is not in a chunk (a one-off job's, a recurring job's on time:
    // fired-through.ts); a catch-up fire, late already, is.
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

    const chunks = await rows(shard, "SELECT * FROM claim_chunks");
    expect(chunks).toHaveLength(1);
    expect(JSON.parse(chunks[0]!.runs as string).sort()).toEqual([...runIds].sort());
    const queued = await rows(shard, "SELECT state, due_at FROM runs WHERE state = 'queued'");
    expect(queued).toHaveLength(5);
    expect(queued.every((r) => r.due_at === null)).toBe(true);

    // The chunk's claim deadline comes (made due here rather than waited for).
    await rows(shard, "UPDATE claim_chunks SET due_at = ?", Date.now() - 1);
    await runDurableObjectAlarm(shard);
    await vi.waitFor(
      async () => {
        const runs = await rows(shard, "SELECT state, redispatches FROM runs");
        expect(runs.map((r) => r.state)).toEqual(Array(5).fill("succeeded"));
        expect(runs.every((r) => r.redispatches === 1)).toBe(true);
      },
      { timeout: 20_000, interval: 100 },
    );
    expect(await rows(shard, "SELECT * FROM claim_chunks")).toEqual([]);
  });

  it("a pause cancels a job's run that waits in a chunk", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("chunk-pause") } });
    const other = `run_${"0".repeat(19)}_other`;
    const runId = scheduledRunId(job.id, Date.now() - 5_000);
    // A run dispatched with others, its claim deadline its chunk's, written straight in so that
    // no consumer claims it meanwhile.
    await rows(
      shardOf(job),
      `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, watched)
       VALUES (?1, ?2, 1, 'schedule', ?3, 'queued', 1, 1, NULL, ?3, 0)`,
      runId,
      job.id,
      Date.now() - 5_000,
    );
    await rows(
      shardOf(job),
      "INSERT INTO claim_chunks (due_at, first_run, runs) VALUES (?, ?, ?)",
      Date.now() + 55_000,
      other,
      JSON.stringify([other, runId]),
    );
    // A shard that found no chunk does not look again until it adds one: this one is started afresh.
    await evictDurableObject(shardOf(job));
    expect((await api(`/v1/jobs/${job.id}/pause`, { method: "POST" })).status).toBe(200);
    const [run] = await rows(shardOf(job), "SELECT state, error FROM runs WHERE id = ?", runId);
    expect(run).toMatchObject({ state: "cancelled", error: "job paused" });
  });
});
