import { ApiError, notFound } from "../api/errors";
import { type ApiKeyRow, insertKey, lineOfKey, listKeys as listCatalogKeys, revokeKeys } from "../catalog/tenants";
import { KEY_ID } from "../model/ids";
import { DEFAULT_SCOPES, type Grant, within } from "../model/scopes";
import { audit, entryOf } from "./audit";
import { type Caller, grantOf } from "./caller";
import { forgetKeys } from "./key-cache";
import { loadTenant, type MintedKey, mintKey } from "./tenants";

/**
 * API keys: add one, move clients over, revoke the old one. The admin token or a key with the
 * admin scope may. A key records the key that made it, and revoking a key revokes the keys it
 * made, except the caller's own line: a leaked key's keys go with it, and a key may still revoke
 * the key that made it (rotation: the old key makes the new one, the new one revokes the old).
 * Sparing lasts for that call only: the spared key stays in its maker's line, so a revocation of
 * that maker made later from outside the line (the owner's, once a leak is found) takes it.
 */

/** What a key shows of itself in the audit log: never the key, nor its hash. */
const keyRecord = (k: { id: string; prefix: string; createdBy: string | null } & Grant) => ({
  id: k.id,
  prefix: k.prefix,
  scopes: k.scopes,
  jobPrefix: k.jobPrefix,
  createdBy: k.createdBy,
});

/**
 * A new key, with the narrowest grant (read) unless asked otherwise, and never more than the
 * caller's own: a key cannot mint one that does more than it can.
 */
export async function addKey(
  env: Env,
  caller: Caller,
  tenantId: string,
  asked: { scopes?: Grant["scopes"] | undefined; jobPrefix?: string | null | undefined } = {},
): Promise<{ row: ApiKeyRow; key: MintedKey }> {
  const tenant = await loadTenant(env, caller, tenantId);
  const grant: Grant = { scopes: asked.scopes ?? DEFAULT_SCOPES, jobPrefix: asked.jobPrefix ?? null };
  if (!within(grant, grantOf(caller))) {
    throw new ApiError(
      403,
      "insufficient_scope",
      "scopes: a key may only make keys with no more scopes, and no wider job prefix, than its own",
    );
  }
  const key = { ...(await mintKey()), ...grant, createdBy: caller.admin ? null : caller.key.id };
  const now = Date.now();
  const entry = entryOf(caller, { tenantId: tenant.id, action: "key.create", subject: key.id, after: keyRecord(key) }, now);
  // Refused only when the calling key was revoked after it signed in: as if it had come a moment later.
  if (!(await insertKey(env.DB, tenant.id, key, now, [audit(env.DB, entry, { ifChanged: true })]))) {
    throw new ApiError(401, "unauthorized", "this key was revoked while it made the new one: nothing was made", {
      "WWW-Authenticate": 'Bearer realm="edgecron"',
    });
  }
  return { row: { ...key, tenantId: tenant.id, createdAt: now, revokedAt: null }, key };
}

/** Revoked keys included; never the keys themselves. */
export async function listKeys(env: Env, caller: Caller, tenantId: string): Promise<ApiKeyRow[]> {
  const tenant = await loadTenant(env, caller, tenantId);
  return listCatalogKeys(env.DB, tenant.id);
}

/** How often a revocation reads the key's line again after another change raced it, before it gives up (409 conflict). */
const REVOKE_ATTEMPTS = 10;

/**
 * The key whose line a revocation spares, null: none. A tenant key never revokes itself through
 * a cascade: when it revokes a key that made it, directly or not, it and the keys it made stay
 * live, and everything else the revoked key made goes (rotation: the new key revokes the old, and
 * whatever else the old one made, a key minted with it once it leaked say, goes with it). When it
 * revokes a key outside its line (a key that made it included), the walk never reaches it, so
 * sparing it changes nothing. The admin token has no key, and spares nothing.
 *
 * A key revoking itself says "I am compromised, or retired": it goes, and its whole line with it,
 * the keys it made included; nothing is spared. Rotate by revoking the old key with the new one,
 * not the old key with itself.
 */
function spareOf(caller: Caller, keyId: string): string | null {
  return caller.admin || caller.key.id === keyId ? null : caller.key.id;
}

/**
 * Revokes a key and every live key it made, transitively, but the caller's own line (spareOf), at
 * once: one transaction, and an audit entry per key (those revoked with their maker name it in
 * `revokedWith`). Answers the ids of the keys revoked with it. A tenant may not leave itself
 * without a live key (it would lock itself out), counting those; the admin may. A key already
 * revoked is answered as revoked, and its live line goes as it would have: otherwise a leaked key
 * L could mint L2, revoke L with L2 (sparing L2, the caller), and the owner's revocation of L,
 * finding it revoked, would leave L2 live.
 */
export async function revokeKey(env: Env, caller: Caller, tenantId: string, keyId: string): Promise<{ alsoRevoked: string[] }> {
  const tenant = await loadTenant(env, caller, tenantId);
  if (!KEY_ID.test(keyId)) throw notFound("key", keyId);
  const spare = spareOf(caller, keyId);
  for (let attempt = 1; attempt <= REVOKE_ATTEMPTS; attempt++) {
    const line = await lineOfKey(env.DB, tenant.id, keyId, spare);
    if (!line) throw notFound("key", keyId);
    const rootLive = line.key.revokedAt === null;
    const made = line.made.filter((k) => k.revokedAt === null);
    if (!rootLive && made.length === 0) return { alsoRevoked: [] };
    if (!caller.admin && line.liveKeys <= (rootLive ? 1 : 0) + made.length) throw lastKey(made.length);
    const now = Date.now();
    const entries = revocationEntries(caller, tenant.id, rootLive ? line.key : null, line.key.id, made, now);
    const ids = [...(rootLive ? [keyId] : []), ...made.map((k) => k.id)];
    if (await revokeKeys(env.DB, tenant.id, keyId, ids, spare, now, !caller.admin, [audit(env.DB, entries, { ifChanged: true })])) {
      forgetKeys(ids);
      return { alsoRevoked: made.map((k) => k.id) };
    }
    // Since the line was read, a key was made in it or one of the tenant's keys was revoked:
    // read it again, so that the entries name exactly the keys revoked.
  }
  throw new ApiError(
    409,
    "conflict",
    `the keys this key made kept changing while it was revoked (${REVOKE_ATTEMPTS} times); nothing was revoked, repeat the request`,
  );
}

/** One key.revoke entry per key: the one asked for (null: it was already revoked), then each revoked with it, naming it. */
function revocationEntries(caller: Caller, tenantId: string, key: ApiKeyRow | null, keyId: string, made: ApiKeyRow[], now: number) {
  const entry = (k: ApiKeyRow, after: Record<string, unknown>) =>
    entryOf(caller, { tenantId, action: "key.revoke", subject: k.id, before: keyRecord(k), after }, now);
  return [...(key ? [entry(key, { revokedAt: now })] : []), ...made.map((k) => entry(k, { revokedAt: now, revokedWith: keyId }))];
}

/**
 * With keys revoked along, this is a key revoking itself (its whole line goes) or a caller
 * revoked since it signed in: the key that is to stay revokes it instead, and is spared.
 */
function lastKey(alsoRevoked: number): ApiError {
  return alsoRevoked === 0
    ? new ApiError(409, "last_key", "this is the tenant's last live key: add another before revoking it")
    : new ApiError(
        409,
        "last_key",
        `revoking this key also revokes the ${alsoRevoked} live key(s) it made, which would leave the tenant no live key: revoke it with a key it made (that key and the keys it made stay live), or add a key it did not make first`,
      );
}
