import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 23,
  name: "waiting runs parked at their tenant's gate",
  // A waiting run its tenant's gate refused (the tenant's maxRunsInFlight is reached) is parked:
  // no due time, so no alarm reads it again, and in `runs_parked` under its tenant in the order
  // it came due (`waiting_since`), from which a wake-up takes as many as the gate freed places
  // (admitter.ts). The columns are left as they were once a run moves on: only a waiting run
  // with no due time is in the index. `admission_waits` is each such tenant's backstop: when
  // the shard asks its gate again should a wake-up be lost, and how long it waits after that.
  sql: `
ALTER TABLE runs ADD COLUMN parked_tenant TEXT;
ALTER TABLE runs ADD COLUMN waiting_since INTEGER;
CREATE INDEX runs_parked ON runs (parked_tenant, waiting_since, id) WHERE state = 'waiting' AND due_at IS NULL;
CREATE TABLE admission_waits (tenant_id TEXT PRIMARY KEY, recheck_at INTEGER NOT NULL, backoff_ms INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX admission_waits_due ON admission_waits (recheck_at);`,
};
