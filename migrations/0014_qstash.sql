-- The /v2 (QStash) surface's own names, per tenant (docs/qstash.md). Its messages and schedules
-- are jobs; these map QStash's names onto them and keep what QStash has and edgecron does not.

-- A schedule's id (Upstash-Schedule-Id, or one made up) and the job that runs it.
CREATE TABLE qstash_schedules (
  tenant_id TEXT NOT NULL,
  schedule_id TEXT NOT NULL,
  job_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, schedule_id)
) WITHOUT ROWID;

-- Upstash-Deduplication-Id (or the content's hash): the message it made, until expires_at.
CREATE TABLE qstash_dedup (
  tenant_id TEXT NOT NULL,
  dedup_id TEXT NOT NULL,
  message_id TEXT NOT NULL,
  url TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, dedup_id)
) WITHOUT ROWID;

CREATE TABLE qstash_queues (
  tenant_id TEXT NOT NULL,
  name TEXT NOT NULL,
  parallelism INTEGER NOT NULL,
  paused INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, name)
) WITHOUT ROWID;

-- A URL group: its endpoints as JSON [{ name?, url }].
CREATE TABLE qstash_topics (
  tenant_id TEXT NOT NULL,
  name TEXT NOT NULL,
  endpoints TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, name)
) WITHOUT ROWID;

-- Dead letters deleted through /v2/dlq: the run stays in its shard (and in /v1), hidden here.
CREATE TABLE qstash_dlq_removed (
  tenant_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  removed_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, run_id)
) WITHOUT ROWID;
