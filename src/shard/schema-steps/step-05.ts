import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 5,
  name: "cost meter",
  // The cost meter (meter.ts): one row per minute and operation, no secondary index, so an
  // upsert writes one row. Rows read and written by the meter's own statements are kept
  // apart from the operations' (meter_rows_*).
  sql: `
CREATE TABLE IF NOT EXISTS cost_minutes (
minute INTEGER NOT NULL,           -- epoch minutes
operation TEXT NOT NULL,           -- an RPC method, 'alarm', or 'settle'
calls INTEGER NOT NULL,            -- Durable Object requests (RPC calls, alarm invocations)
rows_read INTEGER NOT NULL,
rows_written INTEGER NOT NULL,
queue_messages INTEGER NOT NULL,
gate_requests INTEGER NOT NULL,    -- calls to tenant gates (requests billed to those objects)
runs_finished INTEGER NOT NULL,
meter_rows_read INTEGER NOT NULL,
meter_rows_written INTEGER NOT NULL,
PRIMARY KEY (minute, operation)
) WITHOUT ROWID;`,
};
