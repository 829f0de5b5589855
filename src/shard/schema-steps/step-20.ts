import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 20,
  name: "leases: a run's attempt begins at its dispatch",
  // A run's attempt now begins, and is leased, in the transaction that dispatches it; the
  // consumer makes no claim (leases.ts, docs/architecture.md, invariant 5). When each lease
  // ends is listed in `leases`, a row per second per change. The claim deadlines kept other
  // ways before (claim_chunks, a frequent job's fires, the entry that fired a run) are gone:
  // a run an older release dispatched (a workflow run has no attempt of its own, so is not one)
  // and that has no due time of its own gets one, a claim
  // timeout (the default 60 s) after its creation, where the ledger looks at it as at a lease
  // that ended (a queued run is dispatched anew; a claimed one is timed out once its lease has
  // passed). claim_chunks is emptied, not dropped, and frequent jobs' deadlines_from cleared.
  sql: `
CREATE TABLE leases (
due_at INTEGER NOT NULL,
first_run TEXT NOT NULL,
runs TEXT NOT NULL,                -- JSON: [[run id, fence], ...]
PRIMARY KEY (due_at, first_run)
) WITHOUT ROWID;
UPDATE runs SET due_at = created_at + 60000 WHERE due_at IS NULL AND (state = 'queued' OR (state = 'running' AND a_fence IS NOT NULL));
DELETE FROM claim_chunks;
UPDATE jobs SET deadlines_from = NULL WHERE deadlines_from IS NOT NULL;`,
};
