import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 9,
  name: "shard starts in the cost meter",
  // Times the object was constructed (created, or again after an eviction, a restart or a
  // deploy). Not per operation: a start is added to whichever row its meter writes next, so
  // counting it writes no row of its own; readers sum it over all operations.
  sql: `
ALTER TABLE cost_minutes ADD COLUMN starts INTEGER NOT NULL DEFAULT 0;`,
};
