/**
 * Signing outbound requests to targets, per tenant, with rotation.
 *
 * A tenant's secrets are derived from the SIGNING_SECRET Worker secret, never stored:
 * secret(g) = "whsec_" + base64url(HMAC-SHA256(SIGNING_SECRET, `${tenantId}:${g}`)). Its current
 * secret is generation g and its next is g + 1; rotating bumps g, so the old next becomes
 * current and a fresh next appears. Every request is signed with both (see src/verify.ts for
 * the header format), so a target that holds either secret verifies throughout a rotation.
 *
 * `${tenantId}:${g}` cannot collide across tenants even if a tenant id contains ":", because g
 * is an integer and always follows the last colon.
 */
// verify.ts is the standalone leaf targets import, so the header name is defined there.
export { SIGNATURE_HEADER } from "../verify";

const MIN_MASTER_LENGTH = 32;
const CACHE_LIMIT = 1000;
const encoder = new TextEncoder();

/** The signing secret of one tenant's generation, as shown to the user. */
export async function signingSecret(master: string, tenantId: string, generation: number): Promise<string> {
  // A short master would make every tenant's secret guessable offline from one signature.
  if (typeof master !== "string" || master.length < MIN_MASTER_LENGTH) {
    throw new Error(`SIGNING_SECRET is missing or shorter than ${MIN_MASTER_LENGTH} characters`);
  }
  if (!Number.isSafeInteger(generation) || generation < 0) {
    throw new RangeError("signing generation must be a non-negative integer");
  }
  return `whsec_${base64url(await hmacSha256(master, `${tenantId}:${generation}`))}`;
}

// Derivation is two HMACs per request for the same few tenants; bounded so that an isolate
// serving many tenants does not grow without limit. Map order is insertion order, so the
// first key is the oldest. Resolved values only: no request awaits another request's promise.
const secretCache = new Map<string, { current: string; next: string }>();

/** The tenant's current (generation g) and next (g + 1) secrets. */
export async function signingSecrets(master: string, tenantId: string, generation: number): Promise<{ current: string; next: string }> {
  const cacheKey = JSON.stringify([master, tenantId, generation]);
  const cached = secretCache.get(cacheKey);
  if (cached) return cached;
  const secrets = {
    current: await signingSecret(master, tenantId, generation),
    next: await signingSecret(master, tenantId, generation + 1),
  };
  if (secretCache.size >= CACHE_LIMIT) secretCache.delete(secretCache.keys().next().value!);
  secretCache.set(cacheKey, secrets);
  return secrets;
}

/** The Edgecron-Signature value: `t=<unix seconds>,v1=<hex>` for each secret, in order. */
export async function signatureHeader(secrets: string[], runId: string, body: string, nowMs: number): Promise<string> {
  if (secrets.length === 0) throw new Error("signatureHeader: no secrets to sign with");
  const t = Math.floor(nowMs / 1000);
  const message = `${t}.${runId}.${body}`;
  const signatures = await Promise.all(secrets.map(async (secret) => `v1=${hex(await hmacSha256(secret, message))}`));
  return [`t=${t}`, ...signatures].join(",");
}

// Every request is signed with the same few secrets; importing a key per request was a
// measurable share of a consumer batch. Bounded like secretCache, resolved keys only.
const keyCache = new Map<string, CryptoKey>();

export async function hmacSha256(key: string, message: string): Promise<Uint8Array> {
  let cryptoKey = keyCache.get(key);
  if (!cryptoKey) {
    cryptoKey = await crypto.subtle.importKey("raw", encoder.encode(key), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    if (keyCache.size >= CACHE_LIMIT) keyCache.delete(keyCache.keys().next().value!);
    keyCache.set(key, cryptoKey);
  }
  return new Uint8Array(await crypto.subtle.sign("HMAC", cryptoKey, encoder.encode(message)));
}

// Two signatures per request: formatting each byte anew showed in the consumer's CPU profile (bench --profile).
const HEX_BYTES = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));

function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += HEX_BYTES[b];
  return out;
}

export function base64url(bytes: Uint8Array): string {
  return btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
}
