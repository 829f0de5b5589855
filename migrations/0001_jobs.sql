-- The catalog: job definitions as the API accepted them. Runtime state (next fire,
-- runs, attempts) lives in each job's shard, never here.
CREATE TABLE jobs (
  id          TEXT PRIMARY KEY,            -- job_<time><random>: sorts by creation
  name        TEXT,
  shard       TEXT NOT NULL,               -- chosen once at creation, never moves
  version     INTEGER NOT NULL,            -- bumped on every change; shards apply only newer ones
  spec        TEXT NOT NULL,               -- JSON: schedule, target, retry, timeoutMs
  paused      INTEGER NOT NULL DEFAULT 0,
  created_at  INTEGER NOT NULL,            -- epoch ms (UTC)
  updated_at  INTEGER NOT NULL,
  deleted_at  INTEGER                      -- tombstone: the sweep carries deletes to shards too
);

CREATE INDEX jobs_by_shard ON jobs (shard, id);
