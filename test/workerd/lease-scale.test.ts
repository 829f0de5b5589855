import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { armFault, disarmFaults } from "../../src/faults";
import { LEASE_ROW_RUNS, LEASE_RUNS_PER_TICK, Leases } from "../../src/shard/leases";
import { TICK_BATCH } from "../../src/shard/ledger";
import type { Shard } from "../../src/shard/shard";
import { definition, receiverPath, specLike } from "./helpers";

/**
 * Leases and alarm ticks at scale: catch_up jobs whose 100 fires each
 * were missed make thousands of runs in one alarm's work (JOBS below), and their dispatches are then all
 * lost at once. What must hold: no lease row lists more than LEASE_ROW_RUNS runs, no alarm
 * tick fires more than TICK_BATCH runs nor sends more than LEASE_RUNS_PER_TICK again, every
 * run is dispatched and every lost one sent again, and no tick fails. The queue refuses this
 * shard's sends throughout: the dispatches are lost for real, and 20,000 targets are not called.
 */

/**
 * 50 jobs, 5,000 runs: three ticks of each kind at least. At 200 jobs (20,356 runs) the test
 * took 230 s on a shared 2-core machine and its resends had not all drained in 120 s: too slow
 * for CI. The bounding logic is tested at 100,000 leases in Node (test/node-unit/leases.test.ts).
 */
const JOBS = 50;
const MISSED = 100;

type Tick = { fired: number; resent: number; failed: boolean };

/**
 * Counts what each alarm tick of the shard did, from its rows before and after (runs made,
 * resends). Installed on the object itself, so that the ticks the runtime starts on its own
 * (an alarm re-armed for now) are counted as well as any a test starts.
 */
async function countTicks(shard: DurableObjectStub<Shard>): Promise<Tick[]> {
  const ticks: Tick[] = [];
  await runInDurableObject(shard, (instance: Shard, state) => {
    const alarm = instance.alarm.bind(instance);
    const counts = () => state.storage.sql.exec("SELECT COUNT(*) AS n, COALESCE(SUM(redispatches), 0) AS r FROM runs").one();
    instance.alarm = async (info) => {
      const before = counts();
      let failed = false;
      try {
        await alarm(info);
      } catch (err) {
        failed = true;
        throw err;
      } finally {
        const after = counts();
        ticks.push({ fired: Number(after.n) - Number(before.n), resent: Number(after.r) - Number(before.r), failed });
      }
    };
  });
  return ticks;
}

const one = (shard: DurableObjectStub<Shard>, query: string, ...bindings: SqlStorageValue[]) =>
  runInDurableObject(shard, (_s: Shard, state) => state.storage.sql.exec(query, ...bindings).one());

describe("leases and ticks at scale", () => {
  afterEach(() => disarmFaults());

  it("catch_up jobs × 100 missed fires, then every dispatch lost: rows and ticks stay bounded, everything drains", {
    timeout: 240_000,
  }, async () => {
    const name = "shard-900301";
    const shard = env.SHARD.get(env.SHARD.idFromName(name));
    const ticks = await countTicks(shard);
    armFault("shard.queueSend", Infinity, name);

    // Every minute since 105 minutes ago: each job's 100 most recent missed fires are caught up.
    const startAt = Date.now() - 105 * 60_000;
    const spec = {
      ...(await specLike({ every: "1m", startAt: new Date(startAt).toISOString() }, receiverPath("scale"))),
      misfire: "catch_up" as const,
      catchupWindow: "3h",
    };
    const startedAt = Date.now();
    await shard.applyJobs(Array.from({ length: JOBS }, () => definition(spec, startAt)));

    // The runtime runs the alarm by itself, re-armed for now while fires are left.
    await vi.waitFor(
      async () => {
        const { jobs, least } = await one(
          shard,
          "SELECT COUNT(*) AS jobs, MIN(n) AS least FROM (SELECT COUNT(*) AS n FROM runs GROUP BY job_id)",
        );
        expect([jobs, Number(least) >= MISSED]).toEqual([JOBS, true]);
      },
      { timeout: 120_000, interval: 500 },
    );
    const firedIn = Date.now() - startedAt;
    const { runs } = await one(shard, "SELECT COUNT(*) AS runs FROM runs");
    expect(Number(runs)).toBeGreaterThanOrEqual(JOBS * MISSED);
    // Each run was dispatched as it was made, and is listed in one lease row, none over the cap.
    const dispatched = await one(shard, "SELECT COUNT(*) AS n FROM runs WHERE state = 'running' AND a_outcome = 'running'");
    expect(dispatched.n).toBe(runs);
    const leases = await one(
      shard,
      "SELECT COUNT(*) AS rows, MAX(json_array_length(runs)) AS widest, SUM(json_array_length(runs)) AS listed FROM leases",
    );
    expect(Number(leases.widest)).toBeLessThanOrEqual(LEASE_ROW_RUNS);
    expect(leases.listed).toBe(runs);
    const firing = ticks.filter((t) => t.fired > 0);
    expect(firing.length).toBeGreaterThanOrEqual(Math.ceil(Number(runs) / TICK_BATCH));
    expect(Math.max(...firing.map((t) => t.fired))).toBeLessThanOrEqual(TICK_BATCH);

    // A mass dispatch loss: every lease ends now with no outcome.
    const lostAt = Date.now() - 1;
    await runInDurableObject(shard, async (_s: Shard, state) => {
      state.storage.sql.exec("UPDATE leases SET due_at = ?1", lostAt);
      state.storage.sql.exec("UPDATE runs SET lease_until = ?1", lostAt);
      await state.storage.setAlarm(lostAt);
    });
    await vi.waitFor(async () => expect((await one(shard, "SELECT COUNT(*) AS n FROM runs WHERE redispatches = 1")).n).toBe(runs), {
      timeout: 120_000,
      interval: 500,
    });
    const resending = ticks.filter((t) => t.resent > 0);
    expect(resending.length).toBeGreaterThanOrEqual(Math.ceil(Number(runs) / LEASE_RUNS_PER_TICK));
    expect(Math.max(...resending.map((t) => t.resent))).toBeLessThanOrEqual(LEASE_RUNS_PER_TICK);
    expect(ticks.filter((t) => t.failed)).toEqual([]);
    // Still running, each on its one attempt, and listed again for its new lease, rows still capped.
    const after = await one(
      shard,
      "SELECT (SELECT COUNT(*) FROM runs WHERE state = 'running' AND attempt = 1) AS running, (SELECT MAX(json_array_length(runs)) FROM leases) AS widest, (SELECT SUM(json_array_length(runs)) FROM leases WHERE due_at > ?1) AS ahead",
      lostAt,
    );
    expect(after.running).toBe(runs);
    expect(Number(after.widest)).toBeLessThanOrEqual(LEASE_ROW_RUNS);
    expect(after.ahead).toBe(runs);
    console.log(`lease scale: fired in ${firedIn} ms, resent in ${Date.now() - lostAt} ms; `);
    console.log(`lease scale: ${runs} runs; ${firing.length} ticks fired, ${resending.length} resent; ${leases.rows} lease rows`);

    // Gone, with the dispatches kept in its memory: nothing of this test is sent later.
    await runInDurableObject(shard, (_s: Shard, state) => state.storage.deleteAll());
    await evictDurableObject(shard);
  });

  it("leases merged into a row of the same second and first run never make it pass LEASE_ROW_RUNS", async () => {
    const shard = env.SHARD.get(env.SHARD.idFromName("shard-900302"));
    const rows = await runInDurableObject(shard, (_s: Shard, state) => {
      const sql = state.storage.sql;
      const leases = new Leases(sql);
      const until = Date.now() + 3_600_000;
      const ids = Array.from({ length: 3 * LEASE_ROW_RUNS }, (_, i) => `run-${String(i).padStart(5, "0")}`);
      // Three changes, each leading its row with the same run, in the same second.
      for (let change = 0; change < 3; change++) {
        leases.lease(ids[0]!, change + 1, until);
        for (const id of ids.slice(1 + change * (LEASE_ROW_RUNS - 1), 1 + (change + 1) * (LEASE_ROW_RUNS - 1))) leases.lease(id, 1, until);
        leases.write();
      }
      return sql
        .exec("SELECT runs FROM leases")
        .toArray()
        .map((r) => JSON.parse(r.runs as string) as Array<[string, number]>);
    });
    expect(Math.max(...rows.map((r) => r.length))).toBeLessThanOrEqual(LEASE_ROW_RUNS);
    expect(rows.flat().length).toBe(3 * LEASE_ROW_RUNS);
    expect(new Set(rows.flat().map(([id, fence]) => `${id}/${fence}`)).size).toBe(3 * LEASE_ROW_RUNS);
  });
});
