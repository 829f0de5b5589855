import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Shard } from "../../src/shard/shard";
import { ShardStore } from "../../src/shard/store";

/** The shard schema as the release before tenants created it (runs' CHECK without `waiting`). */
const EARLIER_SCHEMA = `
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (id TEXT PRIMARY KEY, version INTEGER NOT NULL, spec TEXT NOT NULL, paused INTEGER NOT NULL,
  deleted INTEGER NOT NULL, created_at INTEGER NOT NULL, next_fire_at INTEGER, next_due_at INTEGER, fires INTEGER NOT NULL DEFAULT 0);
CREATE INDEX jobs_next_due ON jobs (next_due_at) WHERE next_due_at IS NOT NULL;
CREATE TABLE runs (id TEXT PRIMARY KEY, job_id TEXT NOT NULL, job_version INTEGER NOT NULL,
  trigger TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill')), scheduled_at INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'retry_wait', 'buffered', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
  attempt INTEGER NOT NULL, fence INTEGER NOT NULL, due_at INTEGER, created_at INTEGER NOT NULL, started_at INTEGER,
  finished_at INTEGER, status INTEGER, error TEXT, result TEXT, catch_up INTEGER NOT NULL DEFAULT 0);
CREATE INDEX runs_due ON runs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX runs_by_job ON runs (job_id, scheduled_at DESC, id DESC);
CREATE TABLE attempts (run_id TEXT NOT NULL, attempt INTEGER NOT NULL, fence INTEGER NOT NULL, started_at INTEGER NOT NULL,
  finished_at INTEGER, outcome TEXT NOT NULL, status INTEGER, error TEXT, completion_token TEXT NOT NULL, late TEXT,
  PRIMARY KEY (run_id, fence));
CREATE TABLE outbox (run_id TEXT NOT NULL, fence INTEGER NOT NULL, PRIMARY KEY (run_id, fence));
`;

describe("a shard created by the previous release", () => {
  it("is upgraded in place: its runs kept, new states and columns usable, indexes there", async () => {
    const stub = env.SHARD.get(env.SHARD.idFromName(`shard-upgrade-${crypto.randomUUID()}`));
    const result = await runInDurableObject(stub, (_s: Shard, state) => {
      const sql = state.storage.sql;
      for (const { name } of sql
        .exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%' AND name NOT LIKE 'sqlite_%'")
        .toArray()) {
        sql.exec(`DROP TABLE "${name as string}"`);
      }
      sql.exec(EARLIER_SCHEMA);
      sql.exec("INSERT INTO jobs (id, version, spec, paused, deleted, created_at) VALUES ('job_old', 3, '{}', 0, 0, 1)");
      sql.exec(
        "INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, created_at, finished_at, status) VALUES ('run_old', 'job_old', 3, 'schedule', 5, 'succeeded', 1, 1, 5, 6, 200)",
      );

      const store = state.storage.transactionSync(() => new ShardStore(sql));
      const created = store.createRun(
        { id: "run_new", jobId: "job_old", jobVersion: 3, trigger: "manual", scheduledAt: 7, catchUp: false },
        7,
        { state: "waiting" },
      );
      return {
        created,
        old: store.getRun("run_old"),
        job: store.getJob("job_old"),
        waiting: store.waitingRuns(10, 10).map((r) => r.id),
        indexes: sql
          .exec("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' AND name NOT LIKE 'sqlite_%' ORDER BY name")
          .toArray()
          .map((r) => r.name),
      };
    });
    expect(result.created).toBe(true);
    expect(result.old).toMatchObject({ id: "run_old", state: "succeeded", status: 200, permit: null, catchUp: false });
    expect(result.job).toMatchObject({ id: "job_old", tenantId: "default", version: 3, rateNextAt: null });
    expect(result.waiting).toEqual(["run_new"]);
    expect(result.indexes).toEqual(["runs_buffered", "runs_by_job", "runs_dead_letters", "runs_due", "runs_waiting"]);
  });
});
