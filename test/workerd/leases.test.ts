import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { armFault, disarmFaults, faultCounts } from "../../src/faults";
import { scheduledRunId } from "../../src/model/ids";
import type { Shard } from "../../src/shard/shard";
import { definition, receiverPath, specLike } from "./helpers";

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
});
