import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RUN_STATE_SQL_LIST } from "../../src/model/run-states";
import { ShardMeter } from "../../src/shard/meter";
import { migrateShard, SHARD_MIGRATIONS, SHARD_SCHEMA_VERSION, ShardSchemaTooNew } from "../../src/shard/migrations";
import type { Shard } from "../../src/shard/shard";
import { ShardStore } from "../../src/shard/store";
import { ViewStore } from "../../src/shard/view-store";

/** A shard object of its own, emptied of every table, as a shard that never ran. */
async function inBlankShard<T>(fn: (sql: SqlStorage, storage: DurableObjectStorage) => T): Promise<T> {
  const stub = env.SHARD.get(env.SHARD.idFromName(`shard-upgrade-${crypto.randomUUID()}`));
  return runInDurableObject(stub, (_s: Shard, state) => {
    const sql = state.storage.sql;
    for (const { name } of sql.exec("SELECT name FROM sqlite_master WHERE type = 'view'").toArray())
      sql.exec(`DROP VIEW "${name as string}"`);
    const tables = sql.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%' AND name NOT LIKE 'sqlite_%'");
    for (const { name } of tables.toArray()) sql.exec(`DROP TABLE "${name as string}"`);
    return fn(sql, state.storage);
  });
}

/** Tables and indexes as SQLite keeps them: what two schemas must agree on. */
function schemaOf(sql: SqlStorage): Array<{ type: string; name: string; sql: string }> {
  return sql
    .exec("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE '_cf_%' AND name NOT LIKE 'sqlite_%' ORDER BY type, name")
    .toArray() as Array<{ type: string; name: string; sql: string }>;
}

const versionOf = (sql: SqlStorage) => Number(sql.exec("SELECT value FROM meta WHERE key = 'schema_version'").one().value);

describe("shard migrations", () => {
  it("are numbered 1, 2, … with no gap, and the last one's state list is the state table's", () => {
    expect(SHARD_MIGRATIONS.map((m) => m.version)).toEqual(SHARD_MIGRATIONS.map((_, i) => i + 1));
    expect(SHARD_SCHEMA_VERSION).toBe(SHARD_MIGRATIONS.length);
    // A state added to the table needs a migration that rebuilds runs with it.
    const lastStateList = [...SHARD_MIGRATIONS].reverse().find((m) => m.sql.includes("CHECK (state IN"))!;
    expect(lastStateList.sql).toContain(`CHECK (state IN (${RUN_STATE_SQL_LIST}))`);
    // Per-job queries say `finished_at IS NULL AND watched = 1` to reach runs_open: SQLite uses a partial index
    // only for a query that spells its condition the same way.
    const openIndex = [...SHARD_MIGRATIONS].reverse().find((m) => m.sql.includes("INDEX runs_open"))!;
    expect(openIndex.sql).toContain("ON runs (job_id) WHERE finished_at IS NULL AND watched = 1;");
  });

  it("replay history: a version-1 shard holding runs reaches the latest version with its data, equal in schema to a fresh one", async () => {
    const result = await inBlankShard((sql, storage) => {
      storage.transactionSync(() => sql.exec(SHARD_MIGRATIONS[0]!.sql));
      sql.exec("INSERT INTO meta (key, value) VALUES ('schema_version', '1')");
      sql.exec("INSERT INTO jobs (id, version, spec, paused, deleted, created_at) VALUES ('job_old', 3, '{}', 0, 0, 1)");
      // Paused with a due time, as shards before step 16 kept it: the upgrade takes it out of jobs_next_due.
      sql.exec(
        "INSERT INTO jobs (id, version, spec, paused, deleted, created_at, next_fire_at, next_due_at) VALUES ('job_paused', 1, '{}', 1, 0, 1, 50, 50)",
      );
      sql.exec(
        `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, finished_at, status, catch_up)
         VALUES ('run_old', 'job_old', 3, 'schedule', 5, 'succeeded', 1, 1, NULL, 5, 6, 200, 1),
                ('run_due', 'job_old', 3, 'schedule', 8, 'retry_wait', 1, 1, 9, 8, NULL, 503, 0)`,
      );
      sql.exec(
        "INSERT INTO attempts (run_id, attempt, fence, started_at, finished_at, outcome, status, completion_token) VALUES ('run_old', 1, 1, 5, 6, 'succeeded', 200, 'tok')",
      );
      const steps = storage.transactionSync(() => migrateShard(sql));
      const again = storage.transactionSync(() => migrateShard(sql));
      const store = new ShardStore(sql);
      const created = storage.transactionSync(() =>
        store.fires.createRun(
          { id: "run_new", jobId: "job_old", jobVersion: 3, trigger: "manual", scheduledAt: 7, catchUp: false, watched: true },
          7,
          {
            state: "waiting",
          },
        ),
      );
      return {
        steps,
        again,
        version: versionOf(sql),
        created,
        old: store.getRun("run_old"),
        due: store.dueRuns(10, 10).map((r) => r.id),
        attempts: new ViewStore(sql).attempts("run_old"),
        job: store.getJob("job_old"),
        pausedDue: sql.exec("SELECT next_fire_at, next_due_at FROM jobs WHERE id = 'job_paused'").one(),
        waiting: store.admission.waitingRuns(10, 10).map((r) => r.id),
        schema: schemaOf(sql),
      };
    });
    const fresh = await inBlankShard((sql, storage) => {
      storage.transactionSync(() => migrateShard(sql));
      return { version: versionOf(sql), schema: schemaOf(sql) };
    });
    expect(result.steps).toEqual({ from: 1, to: SHARD_SCHEMA_VERSION });
    expect(result.again).toEqual({ from: SHARD_SCHEMA_VERSION, to: SHARD_SCHEMA_VERSION });
    expect(result.version).toBe(SHARD_SCHEMA_VERSION);
    expect(result.created).toBe(true);
    expect(result.old).toMatchObject({ id: "run_old", state: "succeeded", status: 200, permit: null, catchUp: true });
    expect(result.due).toEqual(["run_new", "run_due"]); // a waiting run is due at once, for admission
    expect(result.attempts).toMatchObject([{ fence: 1, outcome: "succeeded", status: 200 }]);
    expect(result.job).toMatchObject({ id: "job_old", tenantId: "default", version: 3, rateNextAt: null });
    expect(result.waiting).toEqual(["run_new"]);
    expect(result.pausedDue).toEqual({ next_fire_at: 50, next_due_at: null });
    expect(fresh.version).toBe(SHARD_SCHEMA_VERSION);
    expect(result.schema).toEqual(fresh.schema);
  });

  it("step 18 makes the meter's rows of each minute one tally with the same counts, which the meter then reads and adds to", async () => {
    const minute = Math.floor(Date.now() / 60_000);
    const result = await inBlankShard((sql, storage) => {
      for (const step of SHARD_MIGRATIONS.slice(0, 17)) storage.transactionSync(() => sql.exec(step.sql));
      sql.exec("INSERT INTO meta (key, value) VALUES ('schema_version', '17')");
      const row = (operation: string, n: number, lag10: number, lagSum: number) =>
        sql.exec(
          `INSERT INTO cost_minutes (minute, operation, calls, rows_read, rows_written, queue_messages, gate_requests, runs_finished,
             meter_rows_read, meter_rows_written, starts, alarm_lag_le_10ms, alarm_lag_sum_ms)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          minute,
          operation,
          n,
          10 * n,
          5 * n,
          n,
          2 * n,
          n,
          1,
          3,
          1,
          lag10,
          lagSum,
        );
      row("claim", 2, 0, 0);
      row("alarm", 3, 3, 21);
      storage.transactionSync(() => migrateShard(sql));
      const meter = new ShardMeter(sql);
      const before = meter.window(Date.now() - 60_000, Date.now());
      meter.count("calls", 1, "claim");
      meter.persist(Date.now(), true);
      return {
        before,
        after: meter.window(Date.now() - 60_000, Date.now()),
        rows: sql.exec("SELECT COUNT(*) AS n FROM cost_tallies").one().n,
        oldRows: sql.exec("SELECT COUNT(*) AS n FROM cost_minutes").one().n,
      };
    });
    const claim = { calls: 2, rowsRead: 20, rowsWritten: 10, queueMessages: 2, gateRequests: 4, runsFinished: 2 };
    expect(result.before.cost.byOperation).toEqual({
      claim,
      alarm: { calls: 3, rowsRead: 30, rowsWritten: 15, queueMessages: 3, gateRequests: 6, runsFinished: 3 },
    });
    expect(result.before.cost.meter).toEqual({ rowsRead: 2, rowsWritten: 6 });
    expect(result.before.durableObject.starts).toBe(2);
    expect(result.before.durableObject.alarmLag.counts[0]).toBe(3);
    expect(result.before.durableObject.alarmLag.sumMs).toBe(21);
    expect(result.after.cost.byOperation.claim!.calls).toBe(claim.calls + 1);
    expect(result.rows).toBe(1);
    // Left empty, for a release from before the step to meter into if rolled back to.
    expect(result.oldRows).toBe(0);
  });

  it("a shard from before versions were recorded is placed by its schema: without jobs.tenant_id at 1, with it at 2", async () => {
    const unrecorded = (steps: number) =>
      inBlankShard((sql, storage) => {
        for (const step of SHARD_MIGRATIONS.slice(0, steps)) storage.transactionSync(() => sql.exec(step.sql));
        return storage.transactionSync(() => migrateShard(sql));
      });
    expect(await unrecorded(1)).toEqual({ from: 1, to: SHARD_SCHEMA_VERSION });
    expect(await unrecorded(2)).toEqual({ from: 2, to: SHARD_SCHEMA_VERSION });
  });

  it("storage newer than the last step is refused, naming both versions, and left as it was", async () => {
    const outcome = await inBlankShard((sql, storage) => {
      storage.transactionSync(() => migrateShard(sql));
      sql.exec("UPDATE meta SET value = ? WHERE key = 'schema_version'", String(SHARD_SCHEMA_VERSION + 1));
      const before = schemaOf(sql);
      let error: unknown = null;
      try {
        storage.transactionSync(() => migrateShard(sql));
      } catch (err) {
        error = err;
      }
      return { error, version: versionOf(sql), same: JSON.stringify(schemaOf(sql)) === JSON.stringify(before) };
    });
    expect(outcome.error).toBeInstanceOf(ShardSchemaTooNew);
    expect(outcome.error).toMatchObject({ stored: SHARD_SCHEMA_VERSION + 1, known: SHARD_SCHEMA_VERSION });
    expect(outcome.version).toBe(SHARD_SCHEMA_VERSION + 1);
    expect(outcome.same).toBe(true);
  });

  it("an upgrade that fails leaves the shard as it was: the steps and the version move together", async () => {
    const outcome = await inBlankShard((sql, storage) => {
      storage.transactionSync(() => sql.exec(SHARD_MIGRATIONS[0]!.sql));
      sql.exec("INSERT INTO meta (key, value) VALUES ('schema_version', '1')");
      // A table in the way of step 2's rebuild makes the step fail half-way.
      sql.exec("CREATE TABLE runs_v2 (x INTEGER)");
      let error: string | null = null;
      try {
        storage.transactionSync(() => migrateShard(sql));
      } catch (err) {
        error = (err as Error).message;
      }
      const jobColumns = sql
        .exec("SELECT name FROM pragma_table_info('jobs')")
        .toArray()
        .map((r) => r.name);
      return { error, version: versionOf(sql), jobColumns };
    });
    expect(outcome.error).not.toBeNull();
    expect(outcome.version).toBe(1);
    expect(outcome.jobColumns).not.toContain("tenant_id");
  });
});
