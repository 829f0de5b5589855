import type { Context } from "hono";
import type { Tenant } from "../catalog/tenants";

/**
 * Who is calling: the admin token (every tenant), or one tenant's API key. Handlers never read
 * the Authorization header themselves; they ask `ownsTenant` or `scopeOf`.
 */
export type Caller = { admin: true } | { admin: false; tenant: Tenant };

export type AppEnv = { Bindings: Env; Variables: { caller: Caller } };
export type AppContext = Context<AppEnv>;

/** The tenant whose objects a caller may see; null for the admin, who sees all. */
export function scopeOf(c: AppContext): string | null {
  const caller = c.var.caller;
  return caller.admin ? null : caller.tenant.id;
}

/** May this caller see or change objects of `tenantId`? Callers who may not get 404, as for unknown ids. */
export function ownsTenant(c: AppContext, tenantId: string): boolean {
  const scope = scopeOf(c);
  return scope === null || scope === tenantId;
}
