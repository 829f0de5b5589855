import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 8,
  name: "outcomes: failure streaks (pauseAfterFailures) and notifications",
  // `watches_outcomes`: the job asks to hear how its runs end (pauseAfterFailures or notify);
  // its partial index lists those jobs alone, so a shard knows them from one small read and a
  // run of any other job finishes without reading its job. `failure_streak`: runs in a row of
  // the job that ended dead or failed; a success sets it back to 0 (written only for watching
  // jobs, and by a success only when it was not 0). `notifications`: the outbox of
  // notifications, each row until its delivery is confirmed (notifier.ts).
  sql: `
ALTER TABLE jobs ADD COLUMN watches_outcomes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN failure_streak INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_watching_outcomes ON jobs (id) WHERE watches_outcomes = 1;
CREATE TABLE notifications (
id TEXT PRIMARY KEY,           -- <run or job id>:<event>: one per event, so a repeated step adds none
job_id TEXT NOT NULL,
tenant_id TEXT NOT NULL,
url TEXT NOT NULL,
body TEXT NOT NULL,            -- the JSON sent
due_at INTEGER NOT NULL,       -- sent (again) then, unless its delivery was confirmed before
sends INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX notifications_due ON notifications (due_at);`,
};
