import { guard } from "./d1";

/**
 * A tenant's live jobs counted in the catalog: the rule of src/model/live-jobs.ts in SQL. The
 * count reads each of the tenant's rows (by jobs_by_tenant), so no creation counts: the tenant's
 * gate counts now and then (src/gate/job-count.ts) and leases room between its counts.
 */

/** A job row's last instant (ISO): its one-off instant or its `endAt`; NULL when it has none. */
const LAST_INSTANT = "COALESCE(json_extract(spec, '$.schedule.at'), json_extract(spec, '$.schedule.endAt'))";

/** The tenant's jobs live at `?2` (ms; a job deleted after it counts) and `?3` (the same instant, ISO). */
export const COUNT_LIVE_JOBS_SQL = `SELECT COUNT(*) AS n FROM jobs
  WHERE tenant_id = ?1 AND (deleted_at IS NULL OR deleted_at > ?2) AND (${LAST_INSTANT} IS NULL OR ${LAST_INSTANT} > ?3)`;

/**
 * How many of the tenant's jobs were live at `cutoff`, and the tenant's new lease epoch, bumped
 * in the same transaction: a lease of an older epoch inserts nothing after this count, so every
 * job is either counted here or inserted on a lease granted after it. Null: no such tenant.
 */
export async function recountLiveJobs(db: D1Database, tenantId: string, cutoff: number): Promise<{ live: number; epoch: number } | null> {
  const [bumped, counted] = await guard("count live jobs", () =>
    db.batch<Record<string, number>>([
      db.prepare("UPDATE tenants SET jobs_epoch = jobs_epoch + 1 WHERE id = ?1 RETURNING jobs_epoch").bind(tenantId),
      db.prepare(COUNT_LIVE_JOBS_SQL).bind(tenantId, cutoff, new Date(cutoff).toISOString()),
    ]),
  );
  const epoch = bumped!.results[0]?.jobs_epoch;
  return epoch === undefined ? null : { live: counted!.results[0]!.n!, epoch };
}
