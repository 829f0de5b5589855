import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 2,
  name: "tenants and flow control: a job's tenant and rate, the waiting state, permits",
  // The runs table's CHECK on states cannot be altered in SQLite, so the table is rebuilt
  // with the list that gained `waiting`; its indexes go with the old table and are made again.
  sql: `
ALTER TABLE jobs ADD COLUMN tenant_id TEXT NOT NULL DEFAULT 'default';
ALTER TABLE jobs ADD COLUMN rate_next_at INTEGER; -- ratePerSecond: the earliest the job's next run may be admitted
CREATE TABLE runs_v2 (
id TEXT PRIMARY KEY,
job_id TEXT NOT NULL,
job_version INTEGER NOT NULL,
trigger TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill')),
scheduled_at INTEGER NOT NULL,
state TEXT NOT NULL CHECK (state IN ('waiting', 'queued', 'running', 'retry_wait', 'buffered', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
attempt INTEGER NOT NULL,
fence INTEGER NOT NULL,
due_at INTEGER,
created_at INTEGER NOT NULL,
started_at INTEGER,
finished_at INTEGER,
status INTEGER,
error TEXT,
result TEXT,
catch_up INTEGER NOT NULL DEFAULT 0,
permit TEXT                        -- the tenant run-in-flight permit it holds (its grant key), if any
);
INSERT INTO runs_v2 (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at,
finished_at, status, error, result, catch_up)
SELECT id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at,
finished_at, status, error, result, catch_up FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v2 RENAME TO runs;
CREATE INDEX runs_buffered ON runs (job_id) WHERE state = 'buffered';
CREATE INDEX runs_dead_letters ON runs (finished_at DESC, id DESC) WHERE state IN ('dead', 'failed');
CREATE INDEX runs_due ON runs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX runs_by_job ON runs (job_id, scheduled_at DESC, id DESC);
CREATE INDEX runs_waiting ON runs (due_at) WHERE state = 'waiting';
-- Tenants of this shard's jobs, as the catalog last said: how to sign, how many may be in flight.
CREATE TABLE tenants (
id TEXT PRIMARY KEY,
version INTEGER NOT NULL,
signing_generation INTEGER NOT NULL,
max_in_flight INTEGER
);
-- Permits to give back to tenant gates: an outbox too, written with the run's change.
CREATE TABLE permit_releases (permit TEXT PRIMARY KEY, tenant_id TEXT NOT NULL);`,
};
