import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 15,
  name: "claim deadlines by chunk",
  // Runs an alarm fires together share one claim deadline (claim-chunks.ts, docs/cost.md): a
  // row per chunk of fires, listing its runs (a JSON array of ids), instead of an entry per
  // run in runs_due. Keyed by when it is due, and by its first run so that two chunks due at
  // the same instant are two rows.
  sql: `
CREATE TABLE claim_chunks (
due_at INTEGER NOT NULL,
first_run TEXT NOT NULL,
runs TEXT NOT NULL,
PRIMARY KEY (due_at, first_run)
) WITHOUT ROWID;`,
};
