-- The Worker's cost meter (src/cost/d1-meter.ts): D1 rows read and written, and the Durable
-- Object requests the Worker makes to tenant gates, per minute and entry point (an API route,
-- the queue consumer, the sweep). One row per minute and operation, no secondary index, so an
-- upsert writes one row; the meter's own rows are kept apart (meter_rows_*).
CREATE TABLE cost_minutes (
  minute INTEGER NOT NULL,
  operation TEXT NOT NULL,
  calls INTEGER NOT NULL,
  rows_read INTEGER NOT NULL,
  rows_written INTEGER NOT NULL,
  gate_requests INTEGER NOT NULL,
  meter_rows_read INTEGER NOT NULL,
  meter_rows_written INTEGER NOT NULL,
  PRIMARY KEY (minute, operation)
) WITHOUT ROWID;
