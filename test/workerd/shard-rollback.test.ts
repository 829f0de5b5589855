import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { SHARD_SCHEMA_VERSION } from "../../src/shard/migrations";
import type { Shard } from "../../src/shard/shard";
import { createJob, receiverPath, shardOf } from "./helpers";

/** Every table's rows and the alarm: what a refusing shard must leave exactly as it was. */
async function storageOf(stub: DurableObjectStub<Shard>): Promise<{ tables: Record<string, unknown[]>; alarm: number | null }> {
  return runInDurableObject(stub, async (_s: Shard, state) => {
    const sql = state.storage.sql;
    const names = sql
      .exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%' AND name NOT LIKE 'sqlite_%' ORDER BY name")
      .toArray()
      .map((r) => r.name as string);
    const tables = Object.fromEntries(names.map((name) => [name, sql.exec(`SELECT * FROM "${name}" ORDER BY 1`).toArray()]));
    return { tables, alarm: await state.storage.getAlarm() };
  });
}

function setSchemaVersion(stub: DurableObjectStub<Shard>, version: number): Promise<void> {
  return runInDurableObject(stub, (_s: Shard, state) => {
    state.storage.sql.exec("UPDATE meta SET value = ? WHERE key = 'schema_version'", String(version));
  });
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("rollback safety", () => {
  it("a shard whose storage is newer than the code refuses every call and its alarm, names both versions, and writes nothing", async () => {
    const job = await createJob({ schedule: { every: "1h" }, target: { url: receiverPath("rollback") } });
    const stub = shardOf(job);
    const newer = SHARD_SCHEMA_VERSION + 1;
    // As a newer release would leave it, then this code started on it (a rollback).
    await setSchemaVersion(stub, newer);
    await evictDurableObject(stub);
    const logged = vi.spyOn(console, "error");
    const before = await storageOf(stub);
    expect(before.tables.jobs).toHaveLength(1);

    const message = new RegExp(`schema version ${newer}, newer than this code's last step ${SHARD_SCHEMA_VERSION}`);
    // Called on the instance, as the RPC layer does: each call throws before it reads or writes.
    const refusals = await runInDurableObject(stub, async (shard: Shard) => {
      const calls = [
        () => shard.metrics(60_000),
        () => shard.trigger(job.id, { triggerKey: "rollback" }),
        () => shard.jobRuntimes([job.id]),
        () => shard.applyJobs([]),
        () => shard.assertAlarm(),
        () => shard.admitWaiting(),
      ];
      return Promise.all(
        calls.map((call) =>
          call().then(
            () => "answered",
            (err: Error) => err.message,
          ),
        ),
      );
    });
    expect(refusals).toHaveLength(6);
    for (const refusal of refusals) expect(refusal).toMatch(message);
    // The alarm too: set it due now and run it; it throws rather than firing from a schema it does not know.
    await runInDurableObject(stub, (_s: Shard, state) => state.storage.setAlarm(Date.now() + 3_600_000));
    const armed = await storageOf(stub);
    await expect(runDurableObjectAlarm(stub)).rejects.toThrow(message);

    // Nothing written: not a run, not the meter's tally, not the retention bookkeeping.
    const after = await storageOf(stub);
    expect(after.tables).toEqual(before.tables);
    expect(armed.tables).toEqual(before.tables);
    // Said once for the instance, however many calls it refused.
    expect(logged.mock.calls.filter((c) => message.test(String(c[0])))).toHaveLength(1);

    // Back on the newer release's version, nothing is lost: this code runs again once the step count matches.
    await setSchemaVersion(stub, SHARD_SCHEMA_VERSION);
    await evictDurableObject(stub);
    expect((await stub.jobRuntimes([job.id]))[0]).toMatchObject({ id: job.id, version: 1 });
  });
});
