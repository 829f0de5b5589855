import { Misconfigured } from "../config";
import { originOf, type StoredTarget, type Target, type TargetSecrets, type TargetView } from "../model/job";
import { bodyDigest } from "./reduced";
import { type KeyRing, loadKeyRing, open, seal } from "./sealing";

/**
 * A target between its API form and its stored form: its origin and method stay readable (the
 * circuit breaker, log lines), its URL, headers and body are sealed under the job id, so a
 * sealed target copied onto another job (another tenant's) does not open. The SSRF guard checks
 * the URL where it is known in clear: when the API accepts it, and at each hop of each attempt.
 */

/** ENCRYPTION_KEYS as a ring; a bad value is the operator's problem (Misconfigured), said without key material. */
export async function keyRing(keys: string | undefined): Promise<KeyRing> {
  try {
    return await loadKeyRing(keys);
  } catch (err) {
    throw new Misconfigured((err as Error).message); // messages name the entry, never key material
  }
}

export async function sealTarget(keys: string | undefined, target: Target, jobId: string): Promise<StoredTarget> {
  const secrets: TargetSecrets = { url: target.url };
  if (target.headers && Object.keys(target.headers).length > 0) secrets.headers = target.headers;
  if (target.body !== undefined) secrets.body = target.body;
  if (target.bodyBase64 !== undefined) secrets.bodyBase64 = target.bodyBase64;
  return {
    origin: new URL(target.url).origin,
    method: target.method,
    headerNames: Object.keys(target.headers ?? {}),
    secrets: await seal(await keyRing(keys), secrets, jobId),
  };
}

/** Whether a stored target needs sealing again: under an older key, or its URL still in clear. */
export function needsResealing(target: StoredTarget, currentKid: string): boolean {
  return target.url !== undefined || (target.secrets !== null && target.secrets.kid !== currentKid);
}

/**
 * A sealed target sealed again under the ring's current key (after a rotation put a new key
 * first), its URL too if it was stored in clear: the same secrets, the same job. A target that
 * does not need it (`needsResealing`) comes back as it was. Throws when its key is no longer in
 * the ring.
 */
export async function resealTarget(keys: string | undefined, target: StoredTarget, jobId: string): Promise<StoredTarget> {
  const ring = await keyRing(keys);
  if (!needsResealing(target, ring.current)) return target;
  const { url, ...rest } = target;
  const secrets = { ...(target.secrets && (await open<TargetSecrets>(ring, target.secrets, jobId))) };
  // A URL stored in clear moves into the sealed part; what was sealed keeps its own.
  if (url !== undefined) secrets.url ??= url;
  return { ...rest, origin: originOf(target), secrets: await seal(ring, secrets, jobId) };
}

/** The key id new values are sealed under (the first of ENCRYPTION_KEYS). */
export async function currentKeyId(keys: string | undefined): Promise<string> {
  return (await keyRing(keys)).current;
}

/** A job saved before targets were sealed holds its headers and body in clear, in the target itself. */
type LegacyTarget = Target & { secrets?: never };
const isLegacy = (target: StoredTarget | LegacyTarget): target is LegacyTarget => !("secrets" in target);

/** A target once opened: its URL is always known. */
export type OpenedTarget = TargetSecrets & { url: string };

/** The names of a target's own headers, for stored and legacy targets alike. */
export function headerNamesOf(target: StoredTarget | LegacyTarget): string[] {
  return isLegacy(target) ? Object.keys(target.headers ?? {}) : target.headerNames;
}

export async function openTarget(keys: string | undefined, target: StoredTarget | LegacyTarget, jobId: string): Promise<OpenedTarget> {
  if (isLegacy(target)) return { url: target.url, headers: target.headers, body: target.body }; // sealed by the sweep
  const secrets = target.secrets === null ? {} : await open<TargetSecrets>(await keyRing(keys), target.secrets, jobId);
  const url = secrets.url ?? target.url;
  if (url === undefined) throw new Error("the target has no URL"); // sealTarget always seals one
  return { ...secrets, url };
}

/**
 * What a response shows: header names, never their values; the URL and body opened if the
 * caller sees sealed values whole (`whole`), otherwise the URL's origin and the body's size and
 * SHA-256 (src/security/reduced.ts). A target that cannot be opened (its key was dropped from
 * ENCRYPTION_KEYS) shows its origin and no body rather than failing the whole answer.
 */
export async function viewTarget(
  keys: string | undefined,
  target: StoredTarget | LegacyTarget,
  jobId: string,
  whole: boolean,
): Promise<TargetView> {
  let opened: TargetSecrets = {};
  try {
    opened = await openTarget(keys, target, jobId);
  } catch (err) {
    console.error(`job ${jobId}: target not shown: ${(err as Error).message}`);
  }
  return shown(opened, originOf(target), target.method, headerNamesOf(target), whole);
}

/**
 * What a response shows of a target as the API was given it, in clear (a job just created): what
 * viewTarget shows once it is sealed, with nothing opened.
 */
export async function viewGivenTarget(target: Target, whole: boolean): Promise<TargetView> {
  const { url, body, bodyBase64 } = target;
  return shown({ url, body, bodyBase64 }, new URL(url).origin, target.method, Object.keys(target.headers ?? {}), whole);
}

async function shown(
  opened: TargetSecrets,
  origin: string,
  method: Target["method"],
  headerNames: string[],
  whole: boolean,
): Promise<TargetView> {
  const { body, bodyBase64 } = opened;
  if (!whole) {
    const digest = await bodyDigest(opened);
    return { url: origin, method, headerNames, ...digest, reduced: true };
  }
  return {
    url: opened.url ?? origin,
    method,
    headerNames,
    ...(body !== undefined && { body }),
    ...(bodyBase64 !== undefined && { bodyBase64 }),
  };
}
