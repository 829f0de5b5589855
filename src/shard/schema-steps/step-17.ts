import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 17,
  name: "a recurring job's next fire on its run",
  // A recurring job's fire writes its next fire on the run it makes (`next_fire_at`, due at
  // `next_due_at`, for the job at `next_version`, its fires counted in `next_fires`), found in
  // runs_next beside jobs_next_due (fired-through.ts, docs/cost.md "A recurring job's next
  // fire"); entries leave with their runs. One way: code from before this step, reading
  // jobs_next_due alone, would never fire a recurring job again once its next fire is on a run.
  sql: `
ALTER TABLE runs ADD COLUMN next_fire_at INTEGER;
ALTER TABLE runs ADD COLUMN next_due_at INTEGER;
ALTER TABLE runs ADD COLUMN next_version INTEGER;
ALTER TABLE runs ADD COLUMN next_fires INTEGER;
CREATE INDEX runs_next ON runs (next_due_at, job_id) WHERE next_due_at IS NOT NULL;`,
};
