import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 14,
  name: "frequent jobs",
  // A job whose next fire is within a claim timeout of its last (frequent-jobs.ts, docs/cost.md):
  // its next due time moves to `soon_at`, a column no index holds, so that a fire writes the
  // job's row and no index entry; `jobs_frequent` finds such jobs when the shard starts, and a
  // job enters it only when it becomes frequent. `deadlines_from`: the earliest fire of the job
  // whose run's claim deadline its own fires still have to look at (those runs have no due_at).
  sql: `
ALTER TABLE jobs ADD COLUMN frequent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN soon_at INTEGER;
ALTER TABLE jobs ADD COLUMN deadlines_from INTEGER;
CREATE INDEX jobs_frequent ON jobs (id) WHERE frequent = 1;`,
};
