import { z } from "zod";

/**
 * What an API key may do. Each scope includes the ones before it: `read` (jobs, runs, metrics,
 * the dashboard), `write` (also change jobs and runs), `admin` (also keys, signing secrets and
 * the tenant's settings). A key may also be limited to the jobs whose name starts with a prefix.
 */
export const SCOPES = ["read", "write", "admin"] as const;
export type Scope = (typeof SCOPES)[number];

/** A new key's scopes unless asked otherwise: the narrowest that works. */
export const DEFAULT_SCOPES: readonly Scope[] = ["read"];
/** Keys made before scopes existed, and a tenant's first key: the tenant's every power. */
export const ALL_SCOPES: readonly Scope[] = SCOPES;

/** What a key holds: its scopes, and the prefix of the job names it is limited to (null: all its tenant's jobs). */
export interface Grant {
  scopes: readonly Scope[];
  jobPrefix: string | null;
}

const rank = (scope: Scope) => SCOPES.indexOf(scope);

/** Does holding `held` allow what `needed` guards? */
export function grants(held: readonly Scope[], needed: Scope): boolean {
  return held.some((scope) => rank(scope) >= rank(needed));
}

/** The scopes column as stored (comma-separated); unknown words are dropped, never granted. */
export function parseScopes(stored: string): Scope[] {
  return stored.split(",").filter((s): s is Scope => (SCOPES as readonly string[]).includes(s));
}

export const formatScopes = (scopes: readonly Scope[]) => [...new Set(scopes)].sort((a, b) => rank(a) - rank(b)).join(",");

/** Does a job of this name fall under the grant's prefix? A nameless job is under no prefix. */
export function coversJob(grant: Grant, name: string | null): boolean {
  return grant.jobPrefix === null || name?.startsWith(grant.jobPrefix) === true;
}

/**
 * Is `wanted` no more than `held`? A key is made only by one that holds at least as much: the
 * same or lower scopes, and the same job prefix or a longer one.
 */
export function within(wanted: Grant, held: Grant): boolean {
  const scopes = wanted.scopes.every((s) => grants(held.scopes, s));
  const prefix = held.jobPrefix === null || wanted.jobPrefix?.startsWith(held.jobPrefix) === true;
  return scopes && prefix;
}

export const ScopeSchema = z.enum(SCOPES);
/** A job-name prefix; not empty, as a job name is at most 200 characters. */
export const JobPrefixSchema = z.string().min(1).max(200);
