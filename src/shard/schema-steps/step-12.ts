import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 12,
  name: "workflow steps as runs",
  // A step of a workflow run is a run of its own (docs/workflows.md): this names the workflow
  // run it belongs to (NULL for every other run). No index: a run's steps are one range of the
  // primary key (stepKeyRange), and an ordinary run writes nothing more than before.
  sql: `
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;`,
};
