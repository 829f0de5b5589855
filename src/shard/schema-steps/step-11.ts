import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 11,
  name: "a tenant's default notifications",
  // A tenant's `notify`, for its jobs that name none of their own (JSON; NULL: none).
  sql: `
ALTER TABLE tenants ADD COLUMN notify TEXT;`,
};
