-- QStash deduplication ids are reserved before their messages are made (src/app/qstash/publish.ts):
-- a reservation names every message it will make (message_ids, a JSON array; message_id stays the
-- first's) and says whether they were handed to their shards (made). A reservation not yet made
-- is made by the next call with its id, under the same message ids, which the shards take once.
-- Rows written before this were made. Expired rows are removed by ranges of the expiry index.
ALTER TABLE qstash_dedup ADD COLUMN message_ids TEXT;
ALTER TABLE qstash_dedup ADD COLUMN made INTEGER NOT NULL DEFAULT 1;
CREATE INDEX qstash_dedup_by_expiry ON qstash_dedup (expires_at);
