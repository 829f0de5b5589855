import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 16,
  name: "paused jobs out of jobs_next_due",
  // The alarm reads jobs_next_due after the position it has fired through (fired-through.ts),
  // and everything behind that position counts as fired: a paused or deleted job, which the
  // alarm passes without firing, must not be in the index. It enters it again when it resumes.
  sql: `
UPDATE jobs SET next_due_at = NULL WHERE next_due_at IS NOT NULL AND (paused = 1 OR deleted = 1);`,
};
