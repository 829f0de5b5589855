-- Where the sweep stands between cron invocations, so that each does a bounded part of the
-- work (docs/architecture.md, "The sweep"). One row.
CREATE TABLE sweep_state (
  id               INTEGER PRIMARY KEY CHECK (id = 1),
  -- The change feed: catalog rows after (changes_at, changes_id) in (updated_at, id) order
  -- have not been compared with their shards yet.
  changes_at       INTEGER NOT NULL,
  changes_id       TEXT NOT NULL DEFAULT '',
  -- The consistency pass: the shard it is in ('' before the first) and the last job id of
  -- that shard compared so far ('' when none).
  pass_shard       TEXT NOT NULL DEFAULT '',
  pass_after       TEXT NOT NULL DEFAULT '',
  passes_completed INTEGER NOT NULL DEFAULT 0,
  pass_started_at  INTEGER,
  -- 1 once no target stored in clear (before sealing) remains: new ones are sealed at creation.
  targets_sealed   INTEGER NOT NULL DEFAULT 0
);

-- The feed starts at the upgrade, less the margin a write may take to become visible
-- (CHANGES_MARGIN_MS in src/reconcile/changes.ts): older rows were compared by the previous
-- release's sweep, and the consistency pass compares every row anyway.
INSERT INTO sweep_state (id, changes_at) VALUES (1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - 60000);

-- The change feed's query walks this index instead of the table.
CREATE INDEX jobs_by_updated ON jobs (updated_at, id);
