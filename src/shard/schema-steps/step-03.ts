import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 3,
  name: "a job's open runs indexed apart from its history",
  // Overlap, maxConcurrency, pause and the wake-up of waiting runs ask for one job's runs
  // that have not ended; through runs_by_job they read every run the job ever had.
  sql: `
CREATE INDEX runs_open ON runs (job_id) WHERE state IN ('waiting', 'queued', 'running', 'retry_wait', 'buffered');`,
};
