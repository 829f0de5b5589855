-- The last sweep invocation that completed, for GET /metrics (admin): when it started, how long
-- it took until its state write, and what it repaired, as a JSON object of counts by kind (a
-- kind added later needs no migration). NULL until an invocation of this release completes.
-- Written with the rest of the row, in the one write per invocation.
ALTER TABLE sweep_state ADD COLUMN last_started_at INTEGER;
ALTER TABLE sweep_state ADD COLUMN last_duration_ms INTEGER;
ALTER TABLE sweep_state ADD COLUMN last_repairs TEXT;
