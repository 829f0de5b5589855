import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 1,
  name: "scheduling: jobs with fire times, runs, attempts, the outbox",
  sql: `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
id TEXT PRIMARY KEY,
version INTEGER NOT NULL,
spec TEXT NOT NULL,
paused INTEGER NOT NULL,
deleted INTEGER NOT NULL,
created_at INTEGER NOT NULL,
next_fire_at INTEGER,              -- the next fire's nominal instant (what its run is scheduled at)
next_due_at INTEGER,               -- when it is acted on: next_fire_at plus the job's jitter offset
fires INTEGER NOT NULL DEFAULT 0   -- scheduled fires so far, for maxRuns
);
CREATE INDEX IF NOT EXISTS jobs_next_due ON jobs (next_due_at) WHERE next_due_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS runs (
id TEXT PRIMARY KEY,
job_id TEXT NOT NULL,
job_version INTEGER NOT NULL,
trigger TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill')),
scheduled_at INTEGER NOT NULL,
state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'retry_wait', 'buffered', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
attempt INTEGER NOT NULL,          -- the attempt being dispatched or run (1-based)
fence INTEGER NOT NULL,            -- bumped on every dispatch; only the current one may claim or report
due_at INTEGER,                    -- when the alarm must look at this run again; null once final
created_at INTEGER NOT NULL,
started_at INTEGER,
finished_at INTEGER,
status INTEGER,
error TEXT,
result TEXT,                       -- what a long-running target sent with its completion
catch_up INTEGER NOT NULL DEFAULT 0 -- the fire was missed and this run catches it up
);
CREATE INDEX IF NOT EXISTS runs_buffered ON runs (job_id) WHERE state = 'buffered';
CREATE INDEX IF NOT EXISTS runs_dead_letters ON runs (finished_at DESC, id DESC) WHERE state IN ('dead', 'failed');
CREATE INDEX IF NOT EXISTS runs_due ON runs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_by_job ON runs (job_id, scheduled_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS attempts (
run_id TEXT NOT NULL,
attempt INTEGER NOT NULL,
fence INTEGER NOT NULL,
started_at INTEGER NOT NULL,
finished_at INTEGER,
outcome TEXT NOT NULL,
status INTEGER,
error TEXT,
completion_token TEXT NOT NULL,    -- the target's credential for /complete and /heartbeat
late TEXT,                         -- an outcome that arrived after the attempt was given up on
PRIMARY KEY (run_id, fence)
);
CREATE TABLE IF NOT EXISTS outbox (
run_id TEXT NOT NULL,
fence INTEGER NOT NULL,
PRIMARY KEY (run_id, fence)
);`,
};
