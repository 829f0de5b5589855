-- The catalog's jobs keyed by their id itself. A table with a TEXT PRIMARY KEY is a rowid
-- table plus an index of the key: each job inserted wrote both. WITHOUT ROWID, the key is the
-- table, one row written less per job (docs/cost.md). The indexes are made again, as they were.
CREATE TABLE jobs_keyed (
  id          TEXT PRIMARY KEY,            -- job_<time><random>: sorts by creation
  name        TEXT,
  shard       TEXT NOT NULL,               -- chosen once at creation, never moves
  version     INTEGER NOT NULL,            -- bumped on every change; shards apply only newer ones
  spec        TEXT NOT NULL,               -- JSON: schedule, target, retry, timeoutMs
  paused      INTEGER NOT NULL DEFAULT 0,
  created_at  INTEGER NOT NULL,            -- epoch ms (UTC)
  updated_at  INTEGER NOT NULL,
  deleted_at  INTEGER,                     -- tombstone: the sweep carries deletes to shards too
  tenant_id   TEXT NOT NULL DEFAULT 'default'
) WITHOUT ROWID;

INSERT INTO jobs_keyed (id, name, shard, version, spec, paused, created_at, updated_at, deleted_at, tenant_id)
  SELECT id, name, shard, version, spec, paused, created_at, updated_at, deleted_at, tenant_id FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_keyed RENAME TO jobs;

CREATE INDEX jobs_by_shard ON jobs (shard, id);
CREATE INDEX jobs_by_tenant ON jobs (tenant_id, id);
CREATE INDEX jobs_by_updated ON jobs (updated_at, id);
