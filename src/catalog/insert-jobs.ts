import { MAX_BOUND_PARAMETERS } from "../sql";
import type { CatalogJob } from "./jobs";

/**
 * New jobs into the catalog, many at once. A job created writes 2 rows (its row and its entry
 * in jobs_by_tenant; migrations/0010_catalog_two_rows.sql), whether one by one or in a batch;
 * a batch saves the round trips and the statements: jobs created together share their tenant
 * and instant (bound once), so one INSERT takes ROWS_PER_INSERT of them within D1's limit of
 * bound parameters, which `wrangler dev` does not enforce (src/sql.ts).
 *
 * The quota (`maxJobs`) is read from the tenants table inside each INSERT, so it holds however
 * the tenant's limits changed since the request's tenant was read. Under a quota a job is
 * written only on room leased from the tenant's gate (src/app/job-room.ts), which counts its
 * live jobs; the INSERT counts nothing, it checks that the lease is of the gate's current count
 * (the tenant's `jobs_epoch`, migrations/0022_job_leases.sql): a lease granted before the gate's
 * last count inserts nothing, and is taken again. An INSERT is whole or not at all; the
 * statements of one call are one D1 batch, a transaction.
 */

/** A job's own values: id, name, shard, spec. The shared ones: tenant, instant, the lease's epoch. */
const PER_JOB = 4;
const SHARED = 3;
export const ROWS_PER_INSERT = Math.floor((MAX_BOUND_PARAMETERS - SHARED) / PER_JOB);

/** The catalog's columns a new job fills: version 1, not paused, created and updated at `?2`. */
function insertSql(rows: number): string {
  const values = Array.from({ length: rows }, (_, r) => {
    const at = SHARED + r * PER_JOB + 1;
    return `(?${at}, ?${at + 1}, ?${at + 2}, ?${at + 3})`;
  }).join(", ");
  return `INSERT INTO jobs (id, tenant_id, name, shard, version, spec, paused, created_at, updated_at)
    SELECT column1, ?1, column2, column3, 1, column4, 0, ?2, ?2 FROM (VALUES ${values})
    WHERE CASE WHEN (SELECT max_jobs FROM tenants WHERE id = ?1) IS NULL THEN 1
      ELSE ?3 IS NOT NULL AND ?3 = (SELECT jobs_epoch FROM tenants WHERE id = ?1) END`;
}

/**
 * One INSERT of up to ROWS_PER_INSERT new jobs of one tenant, made at one instant, on room
 * leased from the tenant's gate at `epoch`, or with none (null: written only if the tenant has
 * no quota).
 */
export function insertJobsStatement(db: D1Database, jobs: readonly CatalogJob[], epoch: number | null): D1PreparedStatement {
  const [first] = jobs;
  if (!first || jobs.length > ROWS_PER_INSERT) throw new Error(`an INSERT takes 1 to ${ROWS_PER_INSERT} jobs, not ${jobs.length}`);
  if (jobs.some((j) => j.tenantId !== first.tenantId || j.createdAt !== first.createdAt || j.version !== 1 || j.paused)) {
    throw new Error("jobs inserted together are new jobs of one tenant, made at one instant, none paused");
  }
  const own = jobs.flatMap((j) => [j.id, j.name, j.shard, JSON.stringify(j.spec)]);
  const values = [first.tenantId, first.createdAt, epoch, ...own];
  return db.prepare(insertSql(jobs.length)).bind(...values);
}

/** A statement's outcome in a batch: its jobs were all inserted, or (the quota) none. */
export const inserted = (result: D1Result): boolean => result.meta.changes > 0;
