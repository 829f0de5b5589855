import { Misconfigured } from "../config";
import type { StoredTarget, Target, TargetSecrets, TargetView } from "../model/job";
import { type KeyRing, loadKeyRing, open, seal } from "./sealing";

/**
 * A target between its API form and its stored form: URL and method stay readable (routing,
 * the SSRF guard, display), headers and body are sealed under the job id, so a sealed target
 * copied onto another job (another tenant's) does not open.
 */

async function keyRing(keys: string | undefined): Promise<KeyRing> {
  try {
    return await loadKeyRing(keys);
  } catch (err) {
    throw new Misconfigured((err as Error).message); // messages name the entry, never key material
  }
}

export async function sealTarget(keys: string | undefined, target: Target, jobId: string): Promise<StoredTarget> {
  const secrets: TargetSecrets = {};
  if (target.headers && Object.keys(target.headers).length > 0) secrets.headers = target.headers;
  if (target.body !== undefined) secrets.body = target.body;
  if (target.bodyBase64 !== undefined) secrets.bodyBase64 = target.bodyBase64;
  return {
    url: target.url,
    method: target.method,
    headerNames: Object.keys(target.headers ?? {}),
    secrets: Object.keys(secrets).length === 0 ? null : await seal(await keyRing(keys), secrets, jobId),
  };
}

/**
 * A sealed target sealed again under the ring's current key (after a rotation put a new key
 * first): the same secrets, the same job. A target already under the current key, or holding no
 * secrets, comes back as it was. Throws when its key is no longer in the ring.
 */
export async function resealTarget(keys: string | undefined, target: StoredTarget, jobId: string): Promise<StoredTarget> {
  const ring = await keyRing(keys);
  if (target.secrets === null || target.secrets.kid === ring.current) return target;
  return { ...target, secrets: await seal(ring, await open<TargetSecrets>(ring, target.secrets, jobId), jobId) };
}

/** The key id new values are sealed under (the first of ENCRYPTION_KEYS). */
export async function currentKeyId(keys: string | undefined): Promise<string> {
  return (await keyRing(keys)).current;
}

/** A job saved before targets were sealed holds its headers and body in clear, in the target itself. */
type LegacyTarget = Target & { secrets?: never };
const isLegacy = (target: StoredTarget | LegacyTarget): target is LegacyTarget => !("secrets" in target);

/** The names of a target's own headers, for stored and legacy targets alike. */
export function headerNamesOf(target: StoredTarget | LegacyTarget): string[] {
  return isLegacy(target) ? Object.keys(target.headers ?? {}) : target.headerNames;
}

export async function openTarget(keys: string | undefined, target: StoredTarget | LegacyTarget, jobId: string): Promise<TargetSecrets> {
  if (isLegacy(target)) return { headers: target.headers, body: target.body }; // sealed at its next change
  return target.secrets === null ? {} : open<TargetSecrets>(await keyRing(keys), target.secrets, jobId);
}

/**
 * What a response shows: header names, never their values. A body that cannot be opened (its
 * key was dropped from ENCRYPTION_KEYS) is left out rather than failing the whole answer.
 */
export async function viewTarget(keys: string | undefined, target: StoredTarget | LegacyTarget, jobId: string): Promise<TargetView> {
  const headerNames = headerNamesOf(target);
  let opened: TargetSecrets = {};
  try {
    opened = await openTarget(keys, target, jobId);
  } catch (err) {
    console.error(`job ${jobId}: target body not shown: ${(err as Error).message}`);
  }
  const { body, bodyBase64 } = opened;
  return {
    url: target.url,
    method: target.method,
    headerNames,
    ...(body !== undefined && { body }),
    ...(bodyBase64 !== undefined && { bodyBase64 }),
  };
}
