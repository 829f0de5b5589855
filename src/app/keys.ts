import { ApiError, notFound } from "../api/errors";
import { type ApiKeyRow, insertKey, listKeys as listCatalogKeys, revokeKey as revokeCatalogKey } from "../catalog/tenants";
import { KEY_ID } from "../model/ids";
import type { Caller } from "./caller";
import { loadTenant, type MintedKey, mintKey } from "./tenants";

/** API keys: add one, move clients over, revoke the old one. The admin or the tenant itself may. */

export async function addKey(env: Env, caller: Caller, tenantId: string): Promise<{ row: ApiKeyRow; key: MintedKey }> {
  const tenant = await loadTenant(env, caller, tenantId);
  const key = await mintKey();
  const now = Date.now();
  await insertKey(env.DB, tenant.id, key, now);
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
  const answer = KEY_ID.test(keyId) ? await revokeCatalogKey(env.DB, tenant.id, keyId, Date.now(), !caller.admin) : null;
  if (answer === null) throw notFound("key", keyId);
  if (answer === "last_key") throw new ApiError(409, "last_key", "this is the tenant's last live key: add another before revoking it");
}
