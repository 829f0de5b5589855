/**
 * The shard's schema as numbered, forward-only steps, the way `migrations/` is for D1 and
 * graphile-worker's `sql/` is for Postgres. Each step is the SQL one release added, written
 * out as it was (never derived from today's constants: a later change to the run states must
 * not rewrite what an old step did), and never edited once released. A fresh shard runs every
 * step; an older one runs the steps it lacks. The version lives in the shard's `meta` table.
 */
export interface ShardMigration {
  version: number;
  name: string;
  sql: string;
}

export const SHARD_MIGRATIONS: readonly ShardMigration[] = [
  {
    version: 1,
    name: "scheduling: jobs with fire times, runs, attempts, the outbox",
    sql: `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  version INTEGER NOT NULL,
  spec TEXT NOT NULL,
  paused INTEGER NOT NULL,
  deleted INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  next_fire_at INTEGER,              -- the next fire's nominal instant (what its run is scheduled at)
  next_due_at INTEGER,               -- when it is acted on: next_fire_at plus the job's jitter offset
  fires INTEGER NOT NULL DEFAULT 0   -- scheduled fires so far, for maxRuns
);
CREATE INDEX IF NOT EXISTS jobs_next_due ON jobs (next_due_at) WHERE next_due_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS runs (
  id TEXT PRIMARY KEY,
  job_id TEXT NOT NULL,
  job_version INTEGER NOT NULL,
  trigger TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill')),
  scheduled_at INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'retry_wait', 'buffered', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
  attempt INTEGER NOT NULL,          -- the attempt being dispatched or run (1-based)
  fence INTEGER NOT NULL,            -- bumped on every dispatch; only the current one may claim or report
  due_at INTEGER,                    -- when the alarm must look at this run again; null once final
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER,
  status INTEGER,
  error TEXT,
  result TEXT,                       -- what a long-running target sent with its completion
  catch_up INTEGER NOT NULL DEFAULT 0 -- the fire was missed and this run catches it up
);
CREATE INDEX IF NOT EXISTS runs_buffered ON runs (job_id) WHERE state = 'buffered';
CREATE INDEX IF NOT EXISTS runs_dead_letters ON runs (finished_at DESC, id DESC) WHERE state IN ('dead', 'failed');
CREATE INDEX IF NOT EXISTS runs_due ON runs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_by_job ON runs (job_id, scheduled_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS attempts (
  run_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  fence INTEGER NOT NULL,
  started_at INTEGER NOT NULL,
  finished_at INTEGER,
  outcome TEXT NOT NULL,
  status INTEGER,
  error TEXT,
  completion_token TEXT NOT NULL,    -- the target's credential for /complete and /heartbeat
  late TEXT,                         -- an outcome that arrived after the attempt was given up on
  PRIMARY KEY (run_id, fence)
);
CREATE TABLE IF NOT EXISTS outbox (
  run_id TEXT NOT NULL,
  fence INTEGER NOT NULL,
  PRIMARY KEY (run_id, fence)
);`,
  },
  {
    version: 2,
    name: "tenants and flow control: a job's tenant and rate, the waiting state, permits",
    // The runs table's CHECK on states cannot be altered in SQLite, so the table is rebuilt
    // with the list that gained `waiting`; its indexes go with the old table and are made again.
    sql: `
ALTER TABLE jobs ADD COLUMN tenant_id TEXT NOT NULL DEFAULT 'default';
ALTER TABLE jobs ADD COLUMN rate_next_at INTEGER; -- ratePerSecond: the earliest the job's next run may be admitted
CREATE TABLE runs_v2 (
  id TEXT PRIMARY KEY,
  job_id TEXT NOT NULL,
  job_version INTEGER NOT NULL,
  trigger TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill')),
  scheduled_at INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('waiting', 'queued', 'running', 'retry_wait', 'buffered', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
  attempt INTEGER NOT NULL,
  fence INTEGER NOT NULL,
  due_at INTEGER,
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER,
  status INTEGER,
  error TEXT,
  result TEXT,
  catch_up INTEGER NOT NULL DEFAULT 0,
  permit TEXT                        -- the tenant run-in-flight permit it holds (its grant key), if any
);
INSERT INTO runs_v2 (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at,
  finished_at, status, error, result, catch_up)
  SELECT id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at,
  finished_at, status, error, result, catch_up FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v2 RENAME TO runs;
CREATE INDEX runs_buffered ON runs (job_id) WHERE state = 'buffered';
CREATE INDEX runs_dead_letters ON runs (finished_at DESC, id DESC) WHERE state IN ('dead', 'failed');
CREATE INDEX runs_due ON runs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX runs_by_job ON runs (job_id, scheduled_at DESC, id DESC);
CREATE INDEX runs_waiting ON runs (due_at) WHERE state = 'waiting';
-- Tenants of this shard's jobs, as the catalog last said: how to sign, how many may be in flight.
CREATE TABLE tenants (
  id TEXT PRIMARY KEY,
  version INTEGER NOT NULL,
  signing_generation INTEGER NOT NULL,
  max_in_flight INTEGER
);
-- Permits to give back to tenant gates: an outbox too, written with the run's change.
CREATE TABLE permit_releases (permit TEXT PRIMARY KEY, tenant_id TEXT NOT NULL);`,
  },
  {
    version: 3,
    name: "a job's open runs indexed apart from its history",
    // Overlap, maxConcurrency, pause and the wake-up of waiting runs ask for one job's runs
    // that have not ended; through runs_by_job they read every run the job ever had.
    sql: `
CREATE INDEX runs_open ON runs (job_id) WHERE state IN ('waiting', 'queued', 'running', 'retry_wait', 'buffered');`,
  },
  {
    version: 4,
    name: "a tenant's retention of finished runs",
    sql: `
ALTER TABLE tenants ADD COLUMN retention_days INTEGER;`,
  },
  {
    version: 5,
    name: "cost meter",
    // The cost meter (meter.ts): one row per minute and operation, no secondary index, so an
    // upsert writes one row. Rows read and written by the meter's own statements are kept
    // apart from the operations' (meter_rows_*).
    sql: `
CREATE TABLE IF NOT EXISTS cost_minutes (
  minute INTEGER NOT NULL,           -- epoch minutes
  operation TEXT NOT NULL,           -- an RPC method, 'alarm', or 'settle'
  calls INTEGER NOT NULL,            -- Durable Object requests (RPC calls, alarm invocations)
  rows_read INTEGER NOT NULL,
  rows_written INTEGER NOT NULL,
  queue_messages INTEGER NOT NULL,
  gate_requests INTEGER NOT NULL,    -- calls to tenant gates (requests billed to those objects)
  runs_finished INTEGER NOT NULL,
  meter_rows_read INTEGER NOT NULL,
  meter_rows_written INTEGER NOT NULL,
  PRIMARY KEY (minute, operation)
) WITHOUT ROWID;`,
  },
  {
    version: 6,
    name: "a run's redispatches",
    // Counts how often the current attempt's dispatch went out again (claim deadline passed, or
    // the Queue dead-lettered it): the claim deadline backs off with it, and it shows a run the
    // queue keeps losing. From this release a redispatch keeps the run's fence (step 1's note
    // on `fence` predates that).
    sql: `
ALTER TABLE runs ADD COLUMN redispatches INTEGER NOT NULL DEFAULT 0;`,
  },
  {
    version: 7,
    name: "fewer rows written per run (docs/cost.md)",
    // Each row inserted into a rowid table is two rows written (the row and its key's index),
    // each index entry entered one more, and an update naming an indexed column one more
    // (docs/cost.md). So: the tables become WITHOUT ROWID, keyed by how they are reached; a
    // job's runs are found through the run id, which starts with the job's (no runs_by_job);
    // runs_open keys on finished_at, which a run sets once, instead of the state, which it
    // changes at every step, and holds only the runs of jobs whose policies ask for their open
    // runs (overlap, maxConcurrency, flow control: \`watched\`); the latest attempt lives on its run's row (a_* columns), so a run
    // whose first attempt succeeds writes no attempt row; a lease is kept apart from due_at, so
    // a claim does not move the run in runs_due; and the outbox goes: dispatches are sent from
    // memory after commit, and one a crash lost goes out again at its claim deadline
    // (docs/architecture.md, invariant 3).
    sql: `
CREATE TABLE jobs_v7 (
  id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL DEFAULT 'default',
  version INTEGER NOT NULL,
  spec TEXT NOT NULL,
  paused INTEGER NOT NULL,
  deleted INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  next_fire_at INTEGER,
  next_due_at INTEGER,
  fires INTEGER NOT NULL DEFAULT 0,
  rate_next_at INTEGER
) WITHOUT ROWID;
INSERT INTO jobs_v7 (id, tenant_id, version, spec, paused, deleted, created_at, next_fire_at, next_due_at, fires, rate_next_at)
  SELECT id, tenant_id, version, spec, paused, deleted, created_at, next_fire_at, next_due_at, fires, rate_next_at FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v7 RENAME TO jobs;
CREATE INDEX jobs_next_due ON jobs (next_due_at) WHERE next_due_at IS NOT NULL;

CREATE TABLE runs_v7 (
  id TEXT PRIMARY KEY,               -- run_<the job id's part>_…: a job's runs are one range of keys
  job_id TEXT NOT NULL,
  job_version INTEGER NOT NULL,
  trigger TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill')),
  scheduled_at INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('waiting', 'queued', 'running', 'retry_wait', 'buffered', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
  attempt INTEGER NOT NULL,
  fence INTEGER NOT NULL,
  due_at INTEGER,                    -- when the alarm looks at the run again; a claim leaves it alone
  lease_until INTEGER,               -- a running attempt's lease; the alarm compares it when due_at comes
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER,               -- set once the run is final: null is what runs_open holds
  status INTEGER,
  error TEXT,
  result TEXT,
  catch_up INTEGER NOT NULL DEFAULT 0,
  permit TEXT,
  redispatches INTEGER NOT NULL DEFAULT 0,
  watched INTEGER NOT NULL DEFAULT 1, -- 0: its job never asks for its open runs, so it stays out of runs_open
  -- The run's latest attempt; earlier ones are rows of attempts.
  a_number INTEGER,
  a_fence INTEGER,
  a_started_at INTEGER,
  a_finished_at INTEGER,
  a_outcome TEXT,
  a_status INTEGER,
  a_error TEXT,
  a_token TEXT,
  a_late TEXT
) WITHOUT ROWID;
INSERT INTO runs_v7 (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at,
  finished_at, status, error, result, catch_up, permit, redispatches)
  SELECT id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at,
  finished_at, status, error, result, catch_up, permit, redispatches FROM runs;
-- A running run's due_at was its lease.
UPDATE runs_v7 SET lease_until = due_at WHERE state = 'running';
-- runs_open now reads finished_at: a final run must have one.
UPDATE runs_v7 SET finished_at = created_at WHERE finished_at IS NULL AND state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped');
DROP TABLE runs;
ALTER TABLE runs_v7 RENAME TO runs;

CREATE TABLE attempts_v7 (
  run_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  fence INTEGER NOT NULL,
  started_at INTEGER NOT NULL,
  finished_at INTEGER,
  outcome TEXT NOT NULL,
  status INTEGER,
  error TEXT,
  completion_token TEXT NOT NULL,
  late TEXT,
  PRIMARY KEY (run_id, fence)
) WITHOUT ROWID;
INSERT INTO attempts_v7 SELECT run_id, attempt, fence, started_at, finished_at, outcome, status, error, completion_token, late FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v7 RENAME TO attempts;
-- Each run's latest attempt moves onto its row.
UPDATE runs SET (a_number, a_fence, a_started_at, a_finished_at, a_outcome, a_status, a_error, a_token, a_late) = (
  SELECT attempt, fence, started_at, finished_at, outcome, status, error, completion_token, late FROM attempts
  WHERE run_id = runs.id ORDER BY fence DESC LIMIT 1)
  WHERE EXISTS (SELECT 1 FROM attempts WHERE run_id = runs.id);
DELETE FROM attempts WHERE EXISTS (SELECT 1 FROM runs WHERE runs.id = attempts.run_id AND runs.a_fence = attempts.fence);

-- Every attempt of a run, wherever it is kept.
CREATE VIEW attempt_log AS
  SELECT run_id, attempt, fence, started_at, finished_at, outcome, status, error, completion_token, late FROM attempts
  UNION ALL
  SELECT id, a_number, a_fence, a_started_at, a_finished_at, a_outcome, a_status, a_error, a_token, a_late FROM runs
  WHERE a_fence IS NOT NULL;

CREATE INDEX runs_due ON runs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX runs_open ON runs (job_id) WHERE finished_at IS NULL AND watched = 1;
CREATE INDEX runs_waiting ON runs (due_at) WHERE state = 'waiting';
CREATE INDEX runs_buffered ON runs (job_id) WHERE state = 'buffered';
CREATE INDEX runs_dead_letters ON runs (finished_at DESC, id DESC) WHERE state IN ('dead', 'failed');

-- Dispatches wait in memory; the claim deadline resends one a crash lost (invariant 3).
-- Rows left in the outbox are of queued runs, whose claim deadlines resend them.
DROP TABLE outbox;`,
  },
  {
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
  },
  {
    version: 9,
    name: "shard starts in the cost meter",
    // Times the object was constructed (created, or again after an eviction, a restart or a
    // deploy). Not per operation: a start is added to whichever row its meter writes next, so
    // counting it writes no row of its own; readers sum it over all operations.
    sql: `
ALTER TABLE cost_minutes ADD COLUMN starts INTEGER NOT NULL DEFAULT 0;`,
  },
  {
    version: 10,
    name: "alarm lag in the cost meter",
    // How late alarms started (alarm-lag.ts), as counts per bucket (lags above the bound
    // before and at most this one, in ms; then above 300,000) and their sum in ms. Like
    // starts, added to whichever row the meter writes next.
    sql: `
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_10ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_25ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_50ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_100ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_250ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_500ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_1000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_2500ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_5000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_10000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_60000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_300000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_above INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_sum_ms INTEGER NOT NULL DEFAULT 0;`,
  },
  {
    version: 11,
    name: "a tenant's default notifications",
    // A tenant's `notify`, for its jobs that name none of their own (JSON; NULL: none).
    sql: `
ALTER TABLE tenants ADD COLUMN notify TEXT;`,
  },
  {
    version: 12,
    name: "workflow steps as runs",
    // A step of a workflow run is a run of its own (docs/workflows.md): this names the workflow
    // run it belongs to (NULL for every other run). No index: a run's steps are one range of the
    // primary key (stepKeyRange), and an ordinary run writes nothing more than before.
    sql: `
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;`,
  },
  {
    version: 13,
    name: "chained jobs in the outbox",
    // The outbox carries a second kind of message: a job to trigger because a run ended
    // (onSuccess/onFailure, notifier.ts). For a 'chain' row `url` holds that job's id
    // and `body` is empty; it is resent and confirmed exactly as a notification is.
    sql: `
ALTER TABLE notifications ADD COLUMN kind TEXT NOT NULL DEFAULT 'notify' CHECK (kind IN ('notify', 'chain'));`,
  },
  {
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
  },
  {
    version: 15,
    name: "claim deadlines by chunk",
    // Runs an alarm fires together share one claim deadline (claim-chunks.ts, docs/cost.md): a
    // row per chunk of fires, listing its runs (a JSON array of ids), instead of an entry per
    // run in runs_due. Keyed by when it is due, and by its first run so that two chunks due at
    // the same instant are two rows.
    sql: `
CREATE TABLE claim_chunks (
  due_at INTEGER NOT NULL,
  first_run TEXT NOT NULL,
  runs TEXT NOT NULL,
  PRIMARY KEY (due_at, first_run)
) WITHOUT ROWID;`,
  },
  {
    version: 16,
    name: "paused jobs out of jobs_next_due",
    // The alarm reads jobs_next_due after the position it has fired through (fired-through.ts),
    // and everything behind that position counts as fired: a paused or deleted job, which the
    // alarm passes without firing, must not be in the index. It enters it again when it resumes.
    sql: `
UPDATE jobs SET next_due_at = NULL WHERE next_due_at IS NOT NULL AND (paused = 1 OR deleted = 1);`,
  },
  {
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
  },
  {
    version: 18,
    name: "the cost meter's tally in one row a minute",
    // The meter wrote a row per operation each time it wrote (two or three: the call, `settle`,
    // the alarm), and a shard with nothing due soon writes after every call, so metering cost
    // more rows than the runs it counted. A minute's tally is now one row, every operation's
    // counts in it as JSON (meter.ts, `Tally`); the rows kept so far become tallies. The old
    // table is emptied, not dropped: a release from before this step, rolled back to, meters
    // into it (what it counts there is not read once this release is back).
    sql: `
CREATE TABLE cost_tallies (
  minute INTEGER PRIMARY KEY,        -- epoch minutes
  tally TEXT NOT NULL                -- JSON: every operation's counts, the meter's own rows, starts, alarm lags
);
INSERT INTO cost_tallies (minute, tally)
SELECT minute, json_object(
  'ops', json_group_object(operation, json_array(calls, rows_read, rows_written, queue_messages, gate_requests, runs_finished)),
  'meter', json_array(SUM(meter_rows_read), SUM(meter_rows_written)),
  'starts', SUM(starts),
  'lags', json_array(
    SUM(alarm_lag_le_10ms), SUM(alarm_lag_le_25ms), SUM(alarm_lag_le_50ms), SUM(alarm_lag_le_100ms),
    SUM(alarm_lag_le_250ms), SUM(alarm_lag_le_500ms), SUM(alarm_lag_le_1000ms), SUM(alarm_lag_le_2500ms),
    SUM(alarm_lag_le_5000ms), SUM(alarm_lag_le_10000ms), SUM(alarm_lag_le_60000ms), SUM(alarm_lag_le_300000ms),
    SUM(alarm_lag_above), SUM(alarm_lag_sum_ms)))
FROM cost_minutes GROUP BY minute;
DELETE FROM cost_minutes;`,
  },
  {
    version: 19,
    name: "the shard's counters since it was created, on the meter's row",
    // GET /metrics serves Prometheus counters and cumulative histograms (counters.ts, totals.ts):
    // each tally the meter writes carries the shard's totals so far as JSON, so they cost no row
    // of their own and the latest row holds them (pruning keeps the newest minutes). Rows from
    // before this step have none: the counters start from 0.
    sql: `
ALTER TABLE cost_tallies ADD COLUMN totals TEXT;`,
  },
  {
    version: 20,
    name: "leases: a run's attempt begins at its dispatch",
    // A run's attempt now begins, and is leased, in the transaction that dispatches it; the
    // consumer makes no claim (leases.ts, docs/architecture.md, invariant 5). When each lease
    // ends is listed in `leases`, a row per second per change. The claim deadlines kept other
    // ways before (claim_chunks, a frequent job's fires, the entry that fired a run) are gone:
    // a run an older release dispatched (a workflow run has no attempt of its own, so is not one)
    // and that has no due time of its own gets one, a claim
    // timeout (the default 60 s) after its creation, where the ledger looks at it as at a lease
    // that ended (a queued run is dispatched anew; a claimed one is timed out once its lease has
    // passed). claim_chunks is emptied, not dropped, and frequent jobs' deadlines_from cleared.
    sql: `
CREATE TABLE leases (
  due_at INTEGER NOT NULL,
  first_run TEXT NOT NULL,
  runs TEXT NOT NULL,                -- JSON: [[run id, fence], ...]
  PRIMARY KEY (due_at, first_run)
) WITHOUT ROWID;
UPDATE runs SET due_at = created_at + 60000 WHERE due_at IS NULL AND (state = 'queued' OR (state = 'running' AND a_fence IS NOT NULL));
DELETE FROM claim_chunks;
UPDATE jobs SET deadlines_from = NULL WHERE deadlines_from IS NOT NULL;`,
  },
];

export const SHARD_SCHEMA_VERSION = SHARD_MIGRATIONS[SHARD_MIGRATIONS.length - 1]!.version;

/**
 * The shard's storage was upgraded by a release newer than this code (a rollback past a step).
 * Steps are one way (step 17 moved recurring jobs' next fires onto their runs, which older code
 * never reads), so code behind its storage would quietly stop firing jobs rather than fail:
 * the shard refuses to run instead, until the newer release is back.
 */
export class ShardSchemaTooNew extends Error {
  constructor(
    readonly stored: number,
    readonly known: number,
  ) {
    super(
      `shard storage is at schema version ${stored}, newer than this code's last step ${known} (a rollback past a migration?): ` +
        "the shard refuses to run until a release with that step is deployed",
    );
    this.name = "ShardSchemaTooNew";
  }
}

/**
 * Brings the shard's storage to the latest version, applying each missing step once. The
 * caller runs this inside one transaction (the Durable Object's constructor does), so an
 * interrupted upgrade leaves nothing half done and the version moves with the steps. Storage
 * newer than the code throws `ShardSchemaTooNew`, before anything is written.
 */
export function migrateShard(sql: SqlStorage): { from: number; to: number } {
  const from = schemaVersion(sql);
  if (from > SHARD_SCHEMA_VERSION) throw new ShardSchemaTooNew(from, SHARD_SCHEMA_VERSION);
  for (const step of SHARD_MIGRATIONS) {
    if (step.version <= from) continue;
    sql.exec(step.sql);
    sql.exec(
      "INSERT INTO meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
      String(step.version),
    );
  }
  return { from, to: SHARD_SCHEMA_VERSION };
}

/**
 * The version the shard's storage is at. Shards created before versions were recorded have
 * none: their schema says which release made them (only the tenants release added
 * `jobs.tenant_id`), and from then on the recorded version decides.
 */
function schemaVersion(sql: SqlStorage): number {
  const hasTable = (name: string) => sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", name).toArray().length > 0;
  if (!hasTable("meta")) return 0;
  const recorded = sql.exec("SELECT value FROM meta WHERE key = 'schema_version'").toArray()[0]?.value;
  if (recorded !== undefined) return Number(recorded);
  if (!hasTable("jobs")) return 0;
  return sql.exec("SELECT 1 FROM pragma_table_info('jobs') WHERE name = 'tenant_id'").toArray().length > 0 ? 2 : 1;
}
