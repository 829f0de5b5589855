import type { Tenant } from "../catalog/tenants";

/**
 * Who is calling: the admin token (every tenant), or one tenant's API key. Application code
 * never reads credentials; it asks `ownsTenant` or `scopeOf`.
 */
export type Caller = { admin: true } | { admin: false; tenant: Tenant };

/** The tenant whose objects a caller may see; null for the admin, who sees all. */
export function scopeOf(caller: Caller): string | null {
  return caller.admin ? null : caller.tenant.id;
}

/** May this caller see or change objects of `tenantId`? Callers who may not get 404, as for unknown ids. */
export function ownsTenant(caller: Caller, tenantId: string): boolean {
  const scope = scopeOf(caller);
  return scope === null || scope === tenantId;
}
