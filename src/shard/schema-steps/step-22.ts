import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 22,
  name: "messages held by their shard alone",
  // A QStash message is a one-off job that only its shard holds: the catalog (D1) has no row
  // for it (docs/qstash.md). `standalone` marks it, so that retention removes the job once its
  // run has left, and the /v2 views can list a tenant's messages, newest first, from
  // `jobs_standalone` (live ones only: a cancelled message leaves the index).
  sql: `
ALTER TABLE jobs ADD COLUMN standalone INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_standalone ON jobs (tenant_id, id) WHERE standalone = 1 AND deleted = 0;`,
};
