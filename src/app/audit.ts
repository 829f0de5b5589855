import { type AuditEntry, type AuditQuery, auditStatement, listAudit } from "../catalog/audit";
import { newAuditId } from "../model/ids";
import { redact } from "../security/redact";
import { actorOf, type Caller, scopeOf } from "./caller";
import { auditCursor, type Page, paged } from "./pagination";

/**
 * The audit log, as the application writes and reads it: every change made through the API,
 * with who made it (a key id, never the key), when, from where, and the change, redacted.
 */

/** What changed, by whom: one entry, redacted, ready for a statement of the change's batch. */
export function entryOf(
  caller: Caller,
  what: { tenantId: string; action: string; subject: string; before?: unknown; after?: unknown },
  now = Date.now(),
): AuditEntry {
  return {
    id: newAuditId(now),
    tenantId: what.tenantId,
    at: now,
    actor: actorOf(caller),
    action: what.action,
    subject: what.subject,
    client: caller.from ?? null,
    change: { before: redact(what.before ?? null), after: redact(what.after ?? null) },
  };
}

/** The statement that writes these entries, to join the change's batch. */
export function audit(db: D1Database, entries: AuditEntry | readonly AuditEntry[], opts: { ifChanged?: boolean } = {}) {
  return auditStatement(db, Array.isArray(entries) ? entries : [entries as AuditEntry], opts);
}

/**
 * For a change D1 does not hold (a trigger, a backfill or a retry is the shard's): the entry is
 * written once the shard answered, so it can be missing if D1 fails right then, never wrong.
 */
export async function recordAfter(db: D1Database, entry: AuditEntry): Promise<void> {
  try {
    await audit(db, entry).run();
  } catch (err) {
    console.error(`audit entry ${entry.action} ${entry.subject} not written`, (err as Error).message);
  }
}

export async function readAudit(
  env: Env,
  caller: Caller,
  query: Omit<AuditQuery, "tenantId"> & { tenantId?: string | undefined; limit: number; cursor?: string | undefined },
): Promise<Page<AuditEntry>> {
  const { limit, cursor, ...filters } = query;
  // A key reads only its own tenant's log; the admin token any tenant's, or all.
  const tenantId = scopeOf(caller) ?? filters.tenantId ?? null;
  return paged(auditCursor, { limit, ...(cursor !== undefined && { cursor }) }, (n, before) =>
    listAudit(env.DB, { ...filters, tenantId }, n, before),
  );
}
