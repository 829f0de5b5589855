import { auditStatement } from "../catalog/audit";
import { scheduleJobsAfter } from "../catalog/qstash";
import type { SweepState } from "../catalog/sweep-state";
import { newAuditId } from "../model/ids";
import type { Meter } from "./budget";

/** Schedule jobs looked at per invocation: one query reads them, by the partial index jobs_qstash_schedules. */
const PAGE = 500;

/**
 * How old a job no schedule id names must be before it is taken for an orphan: an upsert makes
 * its job and then moves the id to it, within one request, far shorter than this.
 */
export const ORPHAN_AGE_MS = 10 * 60_000;

/** What the deletion costs: the jobs marked deleted, their audit entries. */
const DELETE_COST = 2;

/**
 * A step of the sweep: the jobs of QStash schedules that no schedule id names (an upsert that
 * died after making its job, or after moving the id and before deleting the job it replaced)
 * are deleted, so that no cron job fires for ever behind its schedule's back. A page of them per
 * invocation from a cursor; a round over all of them takes as many invocations as they fill
 * pages. Deleted in D1 (version bumped, so the change feed hands the deletion to the shard in
 * this or the next invocation), each with a `schedule.orphan_deleted` audit entry by `sweep`.
 * How many it deleted.
 */
export async function deleteOrphanSchedules(
  db: D1Database,
  meter: Meter,
  state: SweepState,
  reserve: number,
  now: number,
): Promise<number> {
  if (!meter.affords(1 + DELETE_COST, 0, reserve)) return 0;
  const page = await scheduleJobsAfter(db, state.schedulesAfter, PAGE);
  state.schedulesAfter = page.length < PAGE ? "" : page[page.length - 1]!.id;
  // Only a job the /v2 surface made for that schedule id (a /v1 job may bear such a name).
  const orphans = page.filter((j) => !j.named && j.scheduleId !== null && j.createdAt <= now - ORPHAN_AGE_MS);
  if (orphans.length === 0) return 0;
  const { results } = await db
    .prepare(
      `UPDATE jobs SET version = version + 1, updated_at = ?1, deleted_at = ?1
       WHERE id IN (SELECT value FROM json_each(?2)) AND deleted_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM qstash_schedules s WHERE s.tenant_id = jobs.tenant_id AND s.schedule_id = substr(jobs.name, 17) AND s.job_id = jobs.id)
       RETURNING id, tenant_id, name`,
    )
    .bind(now, JSON.stringify(orphans.map((j) => j.id)))
    .all<{ id: string; tenant_id: string; name: string }>();
  if (results.length === 0) return 0;
  // After the change it records, as for a change D1 does not hold: missing if D1 fails right then, never wrong.
  await auditStatement(
    db,
    results.map((r) => ({
      id: newAuditId(now),
      tenantId: r.tenant_id,
      at: now,
      actor: "sweep",
      action: "schedule.orphan_deleted",
      subject: r.id,
      client: null,
      change: { before: { jobId: r.id, scheduleId: r.name.slice("qstash schedule ".length) }, after: { deleted: true } },
    })),
  )
    .run()
    .catch((err: unknown) => console.error(`audit entries of ${results.length} orphan schedule job(s) not written`, err));
  for (const r of results) console.warn(`sweep: job ${r.id} of ${r.name} was named by no schedule id; deleted`);
  return results.length;
}
