import { guard } from "./d1";

/**
 * The audit log in D1 (migrations/0012_audit_log.sql). Entries are written by statements that
 * join the batch of the change they record, so a change is never without its entry nor an
 * entry without its change; `ifChanged` writes one only when the statement just before it
 * changed a row (SQLite's changes()), so a refused compare-and-set records nothing.
 */

export interface AuditEntry {
  id: string;
  tenantId: string;
  at: number;
  actor: string;
  action: string;
  subject: string;
  client: string | null;
  change: { before: unknown; after: unknown };
}

type Row = Record<string, unknown>;

const toEntry = (r: Row): AuditEntry => ({
  id: r.id as string,
  tenantId: r.tenant_id as string,
  at: r.at as number,
  actor: r.actor as string,
  action: r.action as string,
  subject: r.subject as string,
  client: (r.client as string | null) ?? null,
  change: JSON.parse(r.change as string) as AuditEntry["change"],
});

/**
 * One statement for any number of entries: they travel as one JSON parameter (json_each), so a
 * batch of 1,000 jobs needs no more statements for its audit than for its inserts.
 */
export function auditStatement(db: D1Database, entries: readonly AuditEntry[], opts: { ifChanged?: boolean } = {}): D1PreparedStatement {
  const rows = entries.map((e) => ({ ...e, change: JSON.stringify(e.change) }));
  return db
    .prepare(
      `INSERT INTO audit_log (id, tenant_id, at, actor, action, subject, client, change)
       SELECT value ->> 'id', value ->> 'tenantId', value ->> 'at', value ->> 'actor', value ->> 'action',
              value ->> 'subject', value ->> 'client', value ->> 'change'
       FROM json_each(?1) WHERE ?2 = 0 OR changes() > 0`,
    )
    .bind(JSON.stringify(rows), opts.ifChanged ? 1 : 0);
}

export interface AuditQuery {
  /** null: every tenant's (the admin token). */
  tenantId: string | null;
  action?: string | undefined;
  actor?: string | undefined;
  subject?: string | undefined;
  /** Epoch ms, inclusive. */
  since?: number | undefined;
  until?: number | undefined;
}

/** Newest first; `before` is the last id of the previous page. */
export async function listAudit(db: D1Database, q: AuditQuery, limit: number, before?: string): Promise<AuditEntry[]> {
  const { results } = await guard("list audit", () =>
    db
      .prepare(
        `SELECT * FROM audit_log
         WHERE (?1 IS NULL OR tenant_id = ?1) AND (?2 IS NULL OR id < ?2) AND (?3 IS NULL OR action = ?3 OR action LIKE ?3 || '.%')
           AND (?4 IS NULL OR actor = ?4) AND (?5 IS NULL OR subject = ?5) AND (?6 IS NULL OR at >= ?6) AND (?7 IS NULL OR at <= ?7)
         ORDER BY id DESC LIMIT ?8`,
      )
      .bind(q.tenantId, before ?? null, q.action ?? null, q.actor ?? null, q.subject ?? null, q.since ?? null, q.until ?? null, limit)
      .all<Row>(),
  );
  return results.map(toEntry);
}

/** A tenant whose audit log the retention looks at: how long it keeps run history, and its oldest entry's id. */
export interface AuditHolder {
  tenantId: string;
  retentionDays: number | null;
  oldest: string | null;
}

/**
 * The tenants after `after`, in id order, each with its oldest audit entry: one statement, each
 * oldest entry a seek of the primary key, so a round over every tenant costs a query per
 * `limit` tenants when nothing has expired.
 */
export async function auditHolders(db: D1Database, after: string, limit: number): Promise<AuditHolder[]> {
  const { results } = await guard("audit holders", () =>
    db
      .prepare(
        `SELECT t.id, t.retention_days, (SELECT MIN(a.id) FROM audit_log a WHERE a.tenant_id = t.id) AS oldest
         FROM tenants t WHERE t.id > ?1 ORDER BY t.id LIMIT ?2`,
      )
      .bind(after, limit)
      .all<Row>(),
  );
  return results.map((r) => ({
    tenantId: r.id as string,
    retentionDays: (r.retention_days as number | null) ?? null,
    oldest: (r.oldest as string | null) ?? null,
  }));
}

/** A tenant's entries with ids below `beforeId` (older than its cutoff), oldest first. */
export async function expiredAudit(db: D1Database, tenantId: string, beforeId: string, limit: number): Promise<AuditEntry[]> {
  const { results } = await guard("expired audit", () =>
    db.prepare("SELECT * FROM audit_log WHERE tenant_id = ? AND id < ? ORDER BY id LIMIT ?").bind(tenantId, beforeId, limit).all<Row>(),
  );
  return results.map(toEntry);
}

/** Removes a tenant's entries up to and including `throughId`: those just archived. */
export async function deleteAuditThrough(db: D1Database, tenantId: string, throughId: string): Promise<number> {
  const result = await guard("delete audit", () =>
    db.prepare("DELETE FROM audit_log WHERE tenant_id = ? AND id <= ?").bind(tenantId, throughId).run(),
  );
  return result.meta.changes;
}
