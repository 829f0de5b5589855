import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 7,
  name: "fewer rows written per run (docs/cost.md)",
  // Each row inserted into a rowid table is two rows written (the row and its key's index),
  // each index entry entered one more, and an update naming an indexed column one more
  // (docs/cost.md). So: the tables become WITHOUT ROWID, keyed by how they are reached; a
  // job's runs are found through the run id, which starts with the job's (no runs_by_job);
  // runs_open keys on finished_at, which a run sets once, instead of the state, which it
  // changes at every step, and holds only the runs of jobs whose policies ask for their open
  // runs (overlap, maxConcurrency, flow control: \`watched\`); the latest attempt lives on its run's row (a_* columns), so a run
  // whose first attempt succeeds writes no attempt row; a lease is kept apart from due_at, so
  // a claim does not move the run in runs_due; and the outbox goes: dispatches are sent from
  // memory after commit, and one a crash lost goes out again at its claim deadline
  // (docs/architecture.md, invariant 3).
  sql: `
CREATE TABLE jobs_v7 (
id TEXT PRIMARY KEY,
tenant_id TEXT NOT NULL DEFAULT 'default',
version INTEGER NOT NULL,
spec TEXT NOT NULL,
paused INTEGER NOT NULL,
deleted INTEGER NOT NULL,
created_at INTEGER NOT NULL,
next_fire_at INTEGER,
next_due_at INTEGER,
fires INTEGER NOT NULL DEFAULT 0,
rate_next_at INTEGER
) WITHOUT ROWID;
INSERT INTO jobs_v7 (id, tenant_id, version, spec, paused, deleted, created_at, next_fire_at, next_due_at, fires, rate_next_at)
SELECT id, tenant_id, version, spec, paused, deleted, created_at, next_fire_at, next_due_at, fires, rate_next_at FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v7 RENAME TO jobs;
CREATE INDEX jobs_next_due ON jobs (next_due_at) WHERE next_due_at IS NOT NULL;

CREATE TABLE runs_v7 (
id TEXT PRIMARY KEY,               -- run_<the job id's part>_…: a job's runs are one range of keys
job_id TEXT NOT NULL,
job_version INTEGER NOT NULL,
trigger TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill')),
scheduled_at INTEGER NOT NULL,
state TEXT NOT NULL CHECK (state IN ('waiting', 'queued', 'running', 'retry_wait', 'buffered', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
attempt INTEGER NOT NULL,
fence INTEGER NOT NULL,
due_at INTEGER,                    -- when the alarm looks at the run again; a claim leaves it alone
lease_until INTEGER,               -- a running attempt's lease; the alarm compares it when due_at comes
created_at INTEGER NOT NULL,
started_at INTEGER,
finished_at INTEGER,               -- set once the run is final: null is what runs_open holds
status INTEGER,
error TEXT,
result TEXT,
catch_up INTEGER NOT NULL DEFAULT 0,
permit TEXT,
redispatches INTEGER NOT NULL DEFAULT 0,
watched INTEGER NOT NULL DEFAULT 1, -- 0: its job never asks for its open runs, so it stays out of runs_open
-- The run's latest attempt; earlier ones are rows of attempts.
a_number INTEGER,
a_fence INTEGER,
a_started_at INTEGER,
a_finished_at INTEGER,
a_outcome TEXT,
a_status INTEGER,
a_error TEXT,
a_token TEXT,
a_late TEXT
) WITHOUT ROWID;
INSERT INTO runs_v7 (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at,
finished_at, status, error, result, catch_up, permit, redispatches)
SELECT id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at,
finished_at, status, error, result, catch_up, permit, redispatches FROM runs;
-- A running run's due_at was its lease.
UPDATE runs_v7 SET lease_until = due_at WHERE state = 'running';
-- runs_open now reads finished_at: a final run must have one.
UPDATE runs_v7 SET finished_at = created_at WHERE finished_at IS NULL AND state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped');
DROP TABLE runs;
ALTER TABLE runs_v7 RENAME TO runs;

CREATE TABLE attempts_v7 (
run_id TEXT NOT NULL,
attempt INTEGER NOT NULL,
fence INTEGER NOT NULL,
started_at INTEGER NOT NULL,
finished_at INTEGER,
outcome TEXT NOT NULL,
status INTEGER,
error TEXT,
completion_token TEXT NOT NULL,
late TEXT,
PRIMARY KEY (run_id, fence)
) WITHOUT ROWID;
INSERT INTO attempts_v7 SELECT run_id, attempt, fence, started_at, finished_at, outcome, status, error, completion_token, late FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v7 RENAME TO attempts;
-- Each run's latest attempt moves onto its row.
UPDATE runs SET (a_number, a_fence, a_started_at, a_finished_at, a_outcome, a_status, a_error, a_token, a_late) = (
SELECT attempt, fence, started_at, finished_at, outcome, status, error, completion_token, late FROM attempts
WHERE run_id = runs.id ORDER BY fence DESC LIMIT 1)
WHERE EXISTS (SELECT 1 FROM attempts WHERE run_id = runs.id);
DELETE FROM attempts WHERE EXISTS (SELECT 1 FROM runs WHERE runs.id = attempts.run_id AND runs.a_fence = attempts.fence);

-- Every attempt of a run, wherever it is kept.
CREATE VIEW attempt_log AS
SELECT run_id, attempt, fence, started_at, finished_at, outcome, status, error, completion_token, late FROM attempts
UNION ALL
SELECT id, a_number, a_fence, a_started_at, a_finished_at, a_outcome, a_status, a_error, a_token, a_late FROM runs
WHERE a_fence IS NOT NULL;

CREATE INDEX runs_due ON runs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX runs_open ON runs (job_id) WHERE finished_at IS NULL AND watched = 1;
CREATE INDEX runs_waiting ON runs (due_at) WHERE state = 'waiting';
CREATE INDEX runs_buffered ON runs (job_id) WHERE state = 'buffered';
CREATE INDEX runs_dead_letters ON runs (finished_at DESC, id DESC) WHERE state IN ('dead', 'failed');

-- Dispatches wait in memory; the claim deadline resends one a crash lost (invariant 3).
-- Rows left in the outbox are of queued runs, whose claim deadlines resend them.
DROP TABLE outbox;`,
};
