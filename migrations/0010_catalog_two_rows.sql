-- A job created writes 2 catalog rows: its row and its entry in jobs_by_tenant (a tenant's list
-- and job count). jobs_by_shard and jobs_by_updated cost a row each per job created; the sweep
-- finds what it needs without them (docs/architecture.md, "The sweep"; docs/cost.md):
-- - its consistency pass walks the jobs by id and groups each invocation's share by shard;
-- - its change feed finds new jobs by id (a job id starts with its creation instant) and
--   changed jobs through jobs_changed below, which holds only jobs changed since their creation.
-- Apply it just before deploying the release that needs it: the previous release's sweep still
-- works without the two indexes, but reads the whole table for each of its queries.

-- Every change of a job bumps its version; a job just created has version 1. So a job enters
-- this index at its first change, which then writes 2 rows (the job, the entry), as every change
-- did before with jobs_by_updated, and a creation writes nothing here.
CREATE INDEX jobs_changed ON jobs (updated_at, id) WHERE version > 1;
DROP INDEX jobs_by_updated;
DROP INDEX jobs_by_shard;

-- Which tenants have jobs on which shard, deleted ones included: the shards the sweep visits and
-- hands their tenants' settings to, and the shards a tenant's metrics, dead letters and setting
-- changes go to. A job's shard and tenant never change, so a pair is written once, by the first
-- job of a tenant on a shard (2 rows: the pair and its entry by tenant); a later job's INSERT OR
-- IGNORE writes nothing. Kept by a trigger, so that no path that inserts a job can leave it out.
-- A pair is never removed: a tenant's settings sent to a shard without its jobs change nothing.
CREATE TABLE shard_tenants (
  shard      TEXT NOT NULL,
  tenant_id  TEXT NOT NULL,
  PRIMARY KEY (shard, tenant_id)
) WITHOUT ROWID;
CREATE INDEX shard_tenants_by_tenant ON shard_tenants (tenant_id, shard);
INSERT INTO shard_tenants (shard, tenant_id) SELECT DISTINCT shard, tenant_id FROM jobs;
CREATE TRIGGER jobs_register_shard AFTER INSERT ON jobs
BEGIN
  INSERT OR IGNORE INTO shard_tenants (shard, tenant_id) VALUES (NEW.shard, NEW.tenant_id);
END;

-- The feed's cursor over new jobs: the last job id it compared. The previous feed compared every
-- row changed before (changes_at, changes_id), creations included, so it starts at the first id
-- a job created at changes_at can have: 'job_' and that instant in base 36, 9 digits (newJobId).
-- (changes_at, changes_id) keeps its meaning, now over the jobs in jobs_changed.
ALTER TABLE sweep_state ADD COLUMN created_after TEXT NOT NULL DEFAULT '';
WITH RECURSIVE digits (n, s) AS (
  SELECT (SELECT changes_at FROM sweep_state WHERE id = 1), ''
  UNION ALL
  SELECT n / 36, substr('0123456789abcdefghijklmnopqrstuvwxyz', n % 36 + 1, 1) || s FROM digits WHERE n > 0
)
UPDATE sweep_state SET created_after = 'job_' || substr('000000000' || (SELECT s FROM digits WHERE n = 0), -9) WHERE id = 1;

-- The pass now goes shard by shard (tenants, alarm), then through the jobs by id: a pass under
-- way by shard has no place in that order, so the next invocation starts a new one. A lost alarm
-- or a missed change waits at most that much longer, once.
UPDATE sweep_state SET pass_shard = '', pass_after = '', pass_started_at = NULL WHERE id = 1;
