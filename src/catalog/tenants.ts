import type { StoredNotify } from "../model/job";
import { ALL_SCOPES, formatScopes, type Grant, parseScopes } from "../model/scopes";
import type { TenantSettings } from "../protocol/stored-rows";
import { chunksForStatement, placeholders } from "../sql";
import { guard } from "./d1";

/** Tenants and their API keys in D1. Keys are kept only as hashes: a leaked table grants nothing. */

export interface TenantLimits {
  /** Live jobs at once: not deleted, with an instant of their schedule to come (src/model/live-jobs.ts). */
  maxJobs: number | null;
  /** Runs dispatched or running at once, over all the tenant's jobs; the rest wait. */
  maxRunsInFlight: number | null;
  /** API requests per second with this tenant's keys. */
  requestsPerSecond: number | null;
  /**
   * QStash messages live at once (published and not yet delivered, dead or cancelled), counted
   * by the tenant's gate (src/gate/message-quota.ts): messages have no catalog row to count.
   */
  maxLiveMessages: number | null;
  /** Days its finished runs stay in their shards before the archive; null: the default. */
  retentionDays: number | null;
}

export interface Tenant {
  id: string;
  name: string | null;
  limits: TenantLimits;
  /** Notifications for its jobs that name none of their own; null: none. */
  notify: StoredNotify | null;
  signingGeneration: number;
  /** Its requests also carry the first signature scheme, Edgecron-Signature (src/verify.ts). */
  legacySignature: boolean;
  version: number;
  createdAt: number;
}

export interface ApiKeyRow extends Grant {
  id: string;
  tenantId: string;
  prefix: string;
  createdAt: number;
  revokedAt: number | null;
  /** The key that made it; null: the admin token, or its tenant's creation (or made before 0017). */
  createdBy: string | null;
}

/**
 * A key as it is inserted: its public id, the hash of the key, its first characters, what it may
 * do and the key that makes it (null: the admin token).
 */
export interface NewKey extends Grant {
  id: string;
  hash: string;
  prefix: string;
  createdBy: string | null;
}

type Row = Record<string, unknown>;

export const toTenant = (r: Row): Tenant => ({
  id: r.id as string,
  name: (r.name as string | null) ?? null,
  limits: {
    maxJobs: (r.max_jobs as number | null) ?? null,
    maxRunsInFlight: (r.max_runs_in_flight as number | null) ?? null,
    requestsPerSecond: (r.requests_per_second as number | null) ?? null,
    maxLiveMessages: (r.max_live_messages as number | null) ?? null,
    retentionDays: (r.retention_days as number | null) ?? null,
  },
  notify: typeof r.notify === "string" ? (JSON.parse(r.notify) as StoredNotify) : null,
  signingGeneration: r.signing_generation as number,
  legacySignature: r.legacy_signature !== 0,
  version: r.version as number,
  createdAt: r.created_at as number,
});

const toKey = (r: Row): ApiKeyRow => ({
  id: r.id as string,
  tenantId: r.tenant_id as string,
  prefix: r.prefix as string,
  createdAt: r.created_at as number,
  revokedAt: (r.revoked_at as number | null) ?? null,
  scopes: parseScopes(r.scopes as string),
  jobPrefix: (r.job_prefix as string | null) ?? null,
  createdBy: (r.created_by as string | null) ?? null,
});

export const settingsOf = (t: Tenant): TenantSettings => ({
  id: t.id,
  version: t.version,
  signingGeneration: t.signingGeneration,
  legacySignature: t.legacySignature,
  maxRunsInFlight: t.limits.maxRunsInFlight,
  retentionDays: t.limits.retentionDays,
  notify: t.notify,
});

/** Hex SHA-256: API keys carry ~186 random bits, so a fast hash is as good as a slow one here. */
export async function hashKey(key: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A tenant and its first key, in one batch: a tenant never exists without a way in. That key
 * holds every scope (it is how the tenant makes its narrower ones); `also` joins the batch (the
 * audit entry).
 */
export async function insertTenant(
  db: D1Database,
  tenant: Tenant,
  key: Omit<NewKey, keyof Grant | "createdBy">,
  also: D1PreparedStatement[] = [],
): Promise<void> {
  await guard("insert tenant", () =>
    db.batch([
      db
        .prepare(
          `INSERT INTO tenants (id, name, max_jobs, max_runs_in_flight, requests_per_second, retention_days, signing_generation, version, created_at, notify, legacy_signature, max_live_messages)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        )
        .bind(
          tenant.id,
          tenant.name,
          tenant.limits.maxJobs,
          tenant.limits.maxRunsInFlight,
          tenant.limits.requestsPerSecond,
          tenant.limits.retentionDays,
          tenant.signingGeneration,
          tenant.version,
          tenant.createdAt,
          tenant.notify ? JSON.stringify(tenant.notify) : null,
          tenant.legacySignature ? 1 : 0,
          tenant.limits.maxLiveMessages,
        ),
      insertKeyStatement(db, tenant.id, { ...key, scopes: ALL_SCOPES, jobPrefix: null, createdBy: null }, tenant.createdAt),
      ...also,
    ]),
  );
}

/**
 * Inserts a key only while the key that makes it is live: a key minted as its maker is revoked
 * either lands before the revocation, which then takes it too, or not at all. Never one that
 * outlives its maker's revocation.
 */
function insertKeyStatement(db: D1Database, tenantId: string, key: NewKey, now: number) {
  return db
    .prepare(
      `INSERT INTO api_keys (id, tenant_id, hash, prefix, created_at, scopes, job_prefix, created_by)
       SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8
       WHERE ?8 IS NULL OR EXISTS (SELECT 1 FROM api_keys WHERE id = ?8 AND revoked_at IS NULL)`,
    )
    .bind(key.id, tenantId, key.hash, key.prefix, now, formatScopes(key.scopes), key.jobPrefix, key.createdBy);
}

/** A key, and `also` (the audit entry, to be written only if the key was) in the same batch; false: its maker is no longer live. */
export async function insertKey(
  db: D1Database,
  tenantId: string,
  key: NewKey,
  now: number,
  also: D1PreparedStatement[] = [],
): Promise<boolean> {
  const [result] = await guard("insert key", () => db.batch([insertKeyStatement(db, tenantId, key, now), ...also]));
  return result!.meta.changes > 0;
}

/** The statement that reads a tenant, with `extra` columns if asked: for a D1 batch. */
export function tenantStatement(db: D1Database, id: string, extra?: string): D1PreparedStatement {
  return db.prepare(`SELECT *${extra ? `, ${extra}` : ""} FROM tenants WHERE id = ?`).bind(id);
}

export async function getTenant(db: D1Database, id: string): Promise<Tenant | null> {
  const row = await guard("read tenant", () => tenantStatement(db, id).first<Row>());
  return row ? toTenant(row) : null;
}

/** Oldest first; the cursor is the last id of the previous page. */
export async function listTenants(db: D1Database, limit: number, after?: string): Promise<Tenant[]> {
  const { results } = await guard("list tenants", () =>
    db
      .prepare("SELECT * FROM tenants WHERE id > ? ORDER BY id LIMIT ?")
      .bind(after ?? "", limit)
      .all<Row>(),
  );
  return results.map(toTenant);
}

/** The tenant an unrevoked key belongs to, with the key's id and grant, or null. */
export async function tenantOfKey(db: D1Database, hash: string): Promise<{ tenant: Tenant; key: { id: string } & Grant } | null> {
  const row = await guard("read key", () =>
    db
      .prepare(
        `SELECT t.*, k.id AS key_id, k.scopes AS key_scopes, k.job_prefix AS key_job_prefix
         FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.hash = ? AND k.revoked_at IS NULL`,
      )
      .bind(hash)
      .first<Row>(),
  );
  if (!row) return null;
  const key = {
    id: row.key_id as string,
    scopes: parseScopes(row.key_scopes as string),
    jobPrefix: (row.key_job_prefix as string | null) ?? null,
  };
  return { tenant: toTenant(row), key };
}

export async function listKeys(db: D1Database, tenantId: string): Promise<ApiKeyRow[]> {
  const { results } = await guard("list keys", () =>
    db.prepare("SELECT * FROM api_keys WHERE tenant_id = ? ORDER BY id").bind(tenantId).all<Row>(),
  );
  return results.map(toKey);
}

/**
 * A key's line as a revocation takes it: the key, the keys it made and theirs, in one statement,
 * and those of them that are live. The walk stops at `spare` (?3; null: nowhere): that key and
 * the keys it made are not in the line, so a key revoking the key that made it (rotation: the new
 * key revokes the old) is not revoked with it, nor are its own keys. Keys made by `spare` are only
 * ever reached through it: a key has one maker. The walk goes through revoked keys too, the root
 * included, since a key revoked by a key it made leaves that key's line live under it: revoking
 * the revoked key again, or its maker, later takes that line. created_by always names an older
 * key, so a line has no cycle.
 */
const LINE_OF_KEY = `WITH RECURSIVE line(id) AS (
    SELECT id FROM api_keys WHERE id = ?2 AND tenant_id = ?1
    UNION SELECT k.id FROM line JOIN api_keys k ON k.created_by = line.id AND k.tenant_id = ?1 AND k.id IS NOT ?3
  ),
  live(id) AS (SELECT k.id FROM line JOIN api_keys k ON k.id = line.id WHERE k.revoked_at IS NULL)`;

/**
 * A key, the keys it made (transitively, oldest first, revoked ones included; neither `spare` nor
 * the keys it made) and how many keys its tenant has live.
 */
export interface KeyLine {
  key: ApiKeyRow;
  made: ApiKeyRow[];
  liveKeys: number;
}

export async function lineOfKey(db: D1Database, tenantId: string, keyId: string, spare: string | null): Promise<KeyLine | null> {
  const { results } = await guard("read key", () =>
    db
      .prepare(
        `${LINE_OF_KEY}
         SELECT k.*, (SELECT COUNT(*) FROM api_keys WHERE tenant_id = ?1 AND revoked_at IS NULL) AS live_keys
         FROM line JOIN api_keys k ON k.id = line.id ORDER BY k.created_at, k.id`,
      )
      .bind(tenantId, keyId, spare)
      .all<Row>(),
  );
  const rows = results.map((r) => ({ key: toKey(r), liveKeys: r.live_keys as number }));
  const root = rows.find((r) => r.key.id === keyId);
  if (!root) return null;
  return { key: root.key, made: rows.filter((r) => r !== root).map((r) => r.key), liveKeys: root.liveKeys };
}

/**
 * Revokes the live keys of `root`'s line (`live`: root's id first if it is live, then the live
 * keys it made; the walk stops at `spare`, as in lineOfKey), in one statement, and `also` (the
 * audit entries, written only if the keys were) in its batch. A compare-and-set: it revokes only
 * if those are still exactly the line's live keys (none minted nor revoked since they were read),
 * so the entries name every key revoked and no other; false otherwise, and nothing changed.
 * `keepOne` refuses to leave the tenant without a live key (it would lock itself out); the count
 * and the write are the same statement.
 */
export async function revokeKeys(
  db: D1Database,
  tenantId: string,
  root: string,
  live: readonly string[],
  spare: string | null,
  now: number,
  keepOne: boolean,
  also: D1PreparedStatement[] = [],
): Promise<boolean> {
  const [result] = await guard("revoke key", () =>
    db.batch([
      db
        .prepare(
          `${LINE_OF_KEY}
           UPDATE api_keys SET revoked_at = ?4
           WHERE tenant_id = ?1 AND id IN (SELECT value FROM json_each(?5)) AND revoked_at IS NULL
             AND (SELECT COUNT(*) FROM live) = json_array_length(?5)
             AND NOT EXISTS (SELECT 1 FROM live WHERE id NOT IN (SELECT value FROM json_each(?5)))
             AND (?6 = 0 OR (SELECT COUNT(*) FROM api_keys WHERE tenant_id = ?1 AND revoked_at IS NULL) > json_array_length(?5))`,
        )
        .bind(tenantId, root, spare, now, JSON.stringify(live), keepOne ? 1 : 0),
      ...also,
    ]),
  );
  return result!.meta.changes > 0;
}

/** Changes limits, notifications or signing (its generation, its schemes), and the version with them. */
export async function updateTenant(
  db: D1Database,
  id: string,
  /** `notify`: undefined keeps it, null takes it away. */
  change: { limits?: Partial<TenantLimits>; rotateSigning?: boolean; notify?: StoredNotify | null; legacySignature?: boolean },
  /** Joins the update's batch (the audit entry, written only if the tenant changed). */
  also: D1PreparedStatement[] = [],
): Promise<Tenant | null> {
  const l = change.limits ?? {};
  const has = (k: keyof TenantLimits) => (k in l ? 1 : 0);
  const update = db
    .prepare(
      `UPDATE tenants SET version = version + 1,
           max_jobs = CASE WHEN ? THEN ? ELSE max_jobs END,
           max_runs_in_flight = CASE WHEN ? THEN ? ELSE max_runs_in_flight END,
           requests_per_second = CASE WHEN ? THEN ? ELSE requests_per_second END,
           retention_days = CASE WHEN ? THEN ? ELSE retention_days END,
           max_live_messages = CASE WHEN ? THEN ? ELSE max_live_messages END,
           notify = CASE WHEN ? THEN ? ELSE notify END,
           signing_generation = signing_generation + ?,
           legacy_signature = COALESCE(?, legacy_signature)
         WHERE id = ? RETURNING *`,
    )
    .bind(
      has("maxJobs"),
      l.maxJobs ?? null,
      has("maxRunsInFlight"),
      l.maxRunsInFlight ?? null,
      has("requestsPerSecond"),
      l.requestsPerSecond ?? null,
      has("retentionDays"),
      l.retentionDays ?? null,
      has("maxLiveMessages"),
      l.maxLiveMessages ?? null,
      change.notify === undefined ? 0 : 1,
      change.notify ? JSON.stringify(change.notify) : null,
      change.rotateSigning ? 1 : 0,
      change.legacySignature === undefined ? null : change.legacySignature ? 1 : 0,
      id,
    );
  const [result] = await guard("update tenant", () => db.batch<Row>([update, ...also]));
  const row = result!.results[0];
  return row ? toTenant(row) : null;
}

/** The SQL of `tenantsOfShard`, for the test of its plan. */
export const TENANTS_OF_SHARD_SQL = "SELECT t.* FROM shard_tenants s JOIN tenants t ON t.id = s.tenant_id WHERE s.shard = ?";

/**
 * Settings of every tenant with jobs on a shard (deleted ones included): what the sweep hands
 * that shard. From the registry of shards (src/catalog/shards.ts), not from the jobs.
 */
export async function tenantsOfShard(db: D1Database, shard: string): Promise<TenantSettings[]> {
  const { results } = await guard("tenants of shard", () => db.prepare(TENANTS_OF_SHARD_SQL).bind(shard).all<Row>());
  return results.map((r) => settingsOf(toTenant(r)));
}

/** Settings of the given tenants (at most MAX_BOUND_PARAMETERS ids: one statement). */
export async function tenantSettingsByIds(db: D1Database, ids: string[]): Promise<TenantSettings[]> {
  const [chunk = [], ...rest] = chunksForStatement(ids);
  if (rest.length > 0) throw new Error(`tenantSettingsByIds takes one statement's worth of ids, not ${ids.length}`);
  if (chunk.length === 0) return [];
  const { results } = await guard("tenants", () =>
    db
      .prepare(`SELECT * FROM tenants WHERE id IN (${placeholders(chunk.length)})`)
      .bind(...chunk)
      .all<Row>(),
  );
  return results.map((r) => settingsOf(toTenant(r)));
}

/**
 * A tenant's default receiver sealed under another key than `?1`, or with its URL in clear
 * (stored before URLs were sealed). Mirrors `notifyNeedsResealing` (src/security/notify-urls.ts).
 */
const NOTIFY_SEALED_UNDER_ANOTHER_KEY = `notify IS NOT NULL
  AND (json_type(notify, '$.url') IS NOT NULL OR json_extract(notify, '$.secrets.kid') != ?1)`;

/** Tenants whose default receiver the re-seal after a key rotation has left (src/reconcile/resealing.ts). */
export async function tenantsSealedUnderAnotherKey(db: D1Database, kid: string, limit: number): Promise<Tenant[]> {
  const { results } = await guard("tenants sealed under another key", () =>
    db.prepare(`SELECT * FROM tenants WHERE ${NOTIFY_SEALED_UNDER_ANOTHER_KEY} ORDER BY id LIMIT ?2`).bind(kid, limit).all<Row>(),
  );
  return results.map(toTenant);
}

export async function countTenantsSealedUnderAnotherKey(db: D1Database, kid: string): Promise<number> {
  const row = await guard("count tenants sealed under another key", () =>
    db.prepare(`SELECT COUNT(*) AS n FROM tenants WHERE ${NOTIFY_SEALED_UNDER_ANOTHER_KEY}`).bind(kid).first<{ n: number }>(),
  );
  return row?.n ?? 0;
}

/**
 * Replaces a tenant's default receiver as of the version it was read at (a change made meanwhile
 * wins, and this one is skipped), bumping the version so that the sweep hands it to the shards.
 */
export async function replaceTenantNotify(db: D1Database, tenant: Tenant, notify: StoredNotify): Promise<boolean> {
  const result = await guard("replace tenant notify", () =>
    db
      .prepare("UPDATE tenants SET notify = ?, version = version + 1 WHERE id = ? AND version = ?")
      .bind(JSON.stringify(notify), tenant.id, tenant.version)
      .run(),
  );
  return result.meta.changes > 0;
}
