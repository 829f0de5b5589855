import { ApiError, notFound } from "../api/errors";
import { type ApiKeyRow, insertKey, listKeys as listCatalogKeys, revokeKey as revokeCatalogKey } from "../catalog/tenants";
import { KEY_ID } from "../model/ids";
import { DEFAULT_SCOPES, type Grant, within } from "../model/scopes";
import { audit, entryOf } from "./audit";
import { type Caller, grantOf } from "./caller";
import { loadTenant, type MintedKey, mintKey } from "./tenants";

/**
 * API keys: add one, move clients over, revoke the old one. The admin token or a key with the
 * admin scope may. A key records the key that made it.
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

/** A tenant may not revoke its own last live key (it would lock itself out); the admin may. */
export async function revokeKey(env: Env, caller: Caller, tenantId: string, keyId: string): Promise<void> {
  const tenant = await loadTenant(env, caller, tenantId);
  const now = Date.now();
  const entry = (key: ApiKeyRow) =>
    entryOf(caller, { tenantId: tenant.id, action: "key.revoke", subject: key.id, before: keyRecord(key), after: { revokedAt: now } }, now);
  const answer = KEY_ID.test(keyId)
    ? await revokeCatalogKey(env.DB, tenant.id, keyId, now, !caller.admin, (key) => [audit(env.DB, entry(key), { ifChanged: true })])
    : null;
  if (answer === null) throw notFound("key", keyId);
  if (answer === "last_key") throw new ApiError(409, "last_key", "this is the tenant's last live key: add another before revoking it");
}
