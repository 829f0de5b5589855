-- Shards the sweep skipped because a call to them threw: how many in the last invocation that
-- completed (NULL until one of this release has), and how many over every invocation, for
-- GET /metrics (admin). Written with the rest of the row, in the one write per invocation.
ALTER TABLE sweep_state ADD COLUMN last_failed_shards INTEGER;
ALTER TABLE sweep_state ADD COLUMN shard_failures_total INTEGER NOT NULL DEFAULT 0;
