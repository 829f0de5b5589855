import type { Tenant } from "../catalog/tenants";
import { ALL_SCOPES, coversJob, type Grant, grants } from "../model/scopes";

/**
 * Who is calling: the admin token (every tenant, every scope; `next` when it is the token being
 * rotated in), or one tenant's API key with what it was granted. Application code never reads
 * credentials; it asks `ownsTenant`, `scopeOf`, `mayTouchJob` or `grantOf`.
 */
export type Caller = ({ admin: true; next?: boolean } | { admin: false; tenant: Tenant; key: { id: string } & Grant }) & {
  /** The client's address, for the audit log; absent when not known (a call made from code). */
  from?: string | null;
};

/** The tenant whose objects a caller may see; null for the admin, who sees all. */
export function scopeOf(caller: Caller): string | null {
  return caller.admin ? null : caller.tenant.id;
}

/** May this caller see or change objects of `tenantId`? Callers who may not get 404, as for unknown ids. */
export function ownsTenant(caller: Caller, tenantId: string): boolean {
  const scope = scopeOf(caller);
  return scope === null || scope === tenantId;
}

/** What the caller holds; the admin token holds everything. */
export function grantOf(caller: Caller): Grant {
  return caller.admin ? { scopes: ALL_SCOPES, jobPrefix: null } : caller.key;
}

/**
 * Does this caller see what is sealed at rest (target URLs, header values, bodies, notification
 * and callback URLs) whole? Only with the `write` scope, which could change them anyway; a
 * `read` key sees them reduced (src/security/reduced.ts, docs/security.md).
 */
export const seesSealed = (caller: Caller): boolean => grants(grantOf(caller).scopes, "write");

/** May this caller see this job: its tenant's, and under its key's job prefix if it has one. */
export function mayTouchJob(caller: Caller, job: { tenantId: string; name: string | null }): boolean {
  return ownsTenant(caller, job.tenantId) && coversJob(grantOf(caller), job.name);
}

/** Who the audit log names: the key's id, never the key; or the admin token. */
export function actorOf(caller: Caller): string {
  if (!caller.admin) return caller.key.id;
  return caller.next ? "admin:next" : "admin";
}
