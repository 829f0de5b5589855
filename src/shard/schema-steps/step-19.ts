import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 19,
  name: "the shard's counters since it was created, on the meter's row",
  // GET /metrics serves Prometheus counters and cumulative histograms (counters.ts, totals.ts):
  // each tally the meter writes carries the shard's totals so far as JSON, so they cost no row
  // of their own and the latest row holds them (pruning keeps the newest minutes). Rows from
  // before this step have none: the counters start from 0.
  sql: `
ALTER TABLE cost_tallies ADD COLUMN totals TEXT;`,
};
