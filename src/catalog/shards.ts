import { guard } from "./d1";

/**
 * The shards in use, from `shard_tenants` (migrations/0010_catalog_two_rows.sql): a pair per
 * tenant and shard that ever held one of its jobs, written by a trigger at the first such job.
 * Small (tenants × shards at most) and keyed both ways, so none of these reads the jobs.
 */

/** Every shard that holds or held a job (of one tenant, or of any: null). */
export async function shardsInUse(db: D1Database, tenantId: string | null = null): Promise<string[]> {
  const stmt =
    tenantId === null
      ? db.prepare("SELECT DISTINCT shard FROM shard_tenants ORDER BY shard")
      : db.prepare("SELECT shard FROM shard_tenants WHERE tenant_id = ? ORDER BY shard").bind(tenantId);
  const { results } = await guard("shards", () => stmt.all<{ shard: string }>());
  return results.map((r) => r.shard);
}

/** Every tenant that holds or held a job or a message on some shard: those whose gates have counted anything of their runs. */
export async function tenantsInUse(db: D1Database): Promise<string[]> {
  const stmt = db.prepare("SELECT DISTINCT tenant_id FROM shard_tenants ORDER BY tenant_id");
  const { results } = await guard("tenants in use", () => stmt.all<{ tenant_id: string }>());
  return results.map((r) => r.tenant_id);
}

/** Up to `limit` of the tenant's shards in use, in name order, after `after` (null: from the first): one range of the index. */
export async function shardsInUseAfter(db: D1Database, tenantId: string, after: string | null, limit: number): Promise<string[]> {
  const stmt = db
    .prepare("SELECT shard FROM shard_tenants WHERE tenant_id = ? AND shard > ? ORDER BY shard LIMIT ?")
    .bind(tenantId, after ?? "", limit);
  const { results } = await guard("shards", () => stmt.all<{ shard: string }>());
  return results.map((r) => r.shard);
}

/** Whether `shard` holds or held a job of `tenantId` (of any tenant: null): one key looked up. */
export async function holdsJobsOf(db: D1Database, shard: string, tenantId: string | null): Promise<boolean> {
  const stmt =
    tenantId === null
      ? db.prepare("SELECT 1 FROM shard_tenants WHERE shard = ? LIMIT 1").bind(shard)
      : db.prepare("SELECT 1 FROM shard_tenants WHERE shard = ? AND tenant_id = ?").bind(shard, tenantId);
  return (await guard("shards", () => stmt.first())) !== null;
}

/** The SQL of `nextShardInUse`, for the test of its plan. */
export const NEXT_SHARD_SQL = "SELECT MIN(shard) AS shard FROM shard_tenants WHERE shard > ?";

/** The first shard in use after `after` in name order, or null: one seek, for the sweep's pass. */
export async function nextShardInUse(db: D1Database, after: string): Promise<string | null> {
  const row = await guard("shards", () => db.prepare(NEXT_SHARD_SQL).bind(after).first<{ shard: string | null }>());
  return row?.shard ?? null;
}

/**
 * Records that `tenantId` has jobs in `shards`, for jobs no catalog row lists (standalone ones:
 * QStash messages), whose insert trigger would have done it. A pair already there writes no row
 * (billed as none): after a tenant's first message in a shard, this costs a round trip and nothing else.
 */
export async function registerShards(db: D1Database, tenantId: string, shards: string[]): Promise<void> {
  const insert = db.prepare("INSERT OR IGNORE INTO shard_tenants (shard, tenant_id) VALUES (?, ?)");
  await guard("register shards", () => db.batch([...new Set(shards)].map((s) => insert.bind(s, tenantId))));
}
