import { writeAuditArchive } from "../archive/audit-archive";
import { auditHolders, deleteAuditThrough, expiredAudit } from "../catalog/audit";
import type { SweepState } from "../catalog/sweep-state";
import type { Meter } from "./budget";

/**
 * The audit log's retention, a step of the sweep: an entry stays in D1 for its tenant's
 * retention (`retentionDays`, as its run history) but never less than AUDIT_MIN_RETENTION_DAYS,
 * then goes to the archive (R2, ARCHIVE) like run history, and leaves D1; without an archive
 * bucket it is only deleted, as history is. A round visits every tenant, HOLDERS_PER_QUERY at
 * a time, and costs one query per visit while nothing has expired.
 */

/** An audit entry is kept in D1 at least this long, whatever the tenant's run retention. */
export const AUDIT_MIN_RETENTION_DAYS = 90;
const HOLDERS_PER_QUERY = 50;
/** Entries archived per tenant and step: one R2 object a day, one delete. */
export const AUDIT_CHUNK = 500;
const DAY_MS = 86_400_000;

/** The first audit id of the instant `ms`: every entry made before it sorts below (newAuditId). */
const firstAuditIdAt = (ms: number) => `aud_${Math.max(0, ms).toString(36).padStart(9, "0")}`;

function auditCutoff(retentionDays: number | null, now: number): number {
  return now - Math.max(retentionDays ?? 0, AUDIT_MIN_RETENTION_DAYS) * DAY_MS;
}

/** One step: up to a page of tenants, archiving and removing what has expired; the number of entries removed. */
export async function retireAudit(env: Env, db: D1Database, meter: Meter, state: SweepState, share: number, now: number): Promise<number> {
  if (share < 1 || !meter.affords(1, 0)) return 0;
  const stop = meter.d1Queries + share;
  const holders = await auditHolders(db, state.auditAfter, HOLDERS_PER_QUERY);
  if (holders.length === 0) {
    state.auditAfter = "";
    return 0;
  }
  const bucket = (env as Partial<Env>).ARCHIVE;
  let removed = 0;
  for (const holder of holders) {
    const before = firstAuditIdAt(auditCutoff(holder.retentionDays, now));
    if (holder.oldest !== null && holder.oldest < before) {
      // Its expired entries: a read and a delete. Without the room for both, the next step resumes here.
      if (meter.d1Queries + 2 > stop) return removed;
      const expired = await expiredAudit(db, holder.tenantId, before, AUDIT_CHUNK);
      if (expired.length > 0) {
        if (bucket) await writeAuditArchive(bucket, holder.tenantId, expired, now);
        removed += await deleteAuditThrough(db, holder.tenantId, expired.at(-1)!.id);
      }
      // More left than one chunk: this tenant again, next step.
      if (expired.length === AUDIT_CHUNK) return removed;
    }
    state.auditAfter = holder.tenantId;
  }
  if (holders.length < HOLDERS_PER_QUERY) state.auditAfter = "";
  return removed;
}
