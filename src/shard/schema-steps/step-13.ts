import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 13,
  name: "chained jobs in the outbox",
  // The outbox carries a second kind of message: a job to trigger because a run ended
  // (onSuccess/onFailure, notifier.ts). For a 'chain' row `url` holds that job's id
  // and `body` is empty; it is resent and confirmed exactly as a notification is.
  sql: `
ALTER TABLE notifications ADD COLUMN kind TEXT NOT NULL DEFAULT 'notify' CHECK (kind IN ('notify', 'chain'));`,
};
