import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 4,
  name: "a tenant's retention of finished runs",
  sql: `
ALTER TABLE tenants ADD COLUMN retention_days INTEGER;`,
};
