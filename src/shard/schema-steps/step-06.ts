import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 6,
  name: "a run's redispatches",
  // Counts how often the current attempt's dispatch went out again (claim deadline passed, or
  // the Queue dead-lettered it): the claim deadline backs off with it, and it shows a run the
  // queue keeps losing. From this release a redispatch keeps the run's fence (step 1's note
  // on `fence` predates that).
  sql: `
ALTER TABLE runs ADD COLUMN redispatches INTEGER NOT NULL DEFAULT 0;`,
};
