/**
 * Secrets at rest: a job target's headers and body are stored sealed with AES-256-GCM, so a
 * leaked D1 export or backup shows no credentials. Keys come from the ENCRYPTION_KEYS Worker
 * secret as a ring: the first key seals, every key opens, so a key can be rotated by putting a
 * new one first and dropping the old one once nothing sealed under it remains.
 */

/** Ciphertext as stored (JSON-safe): key id, 12-byte random IV, ciphertext+tag, base64url. */
export interface Sealed {
  kid: string;
  iv: string;
  data: string;
}

export interface KeyRing {
  /** The key id new values are sealed under. */
  current: string;
  keys: ReadonlyMap<string, CryptoKey>;
}

const KID = /^[A-Za-z0-9_-]{1,32}$/;
// Strict alphabet check before atob, which would otherwise skip whitespace and accept junk.
const BASE64 = /^(?:[A-Za-z0-9+/]+|[A-Za-z0-9_-]+)={0,2}$/;
const IV_BYTES = 12;

// The same secret arrives with every request and importKey is async, so rings are imported
// once per isolate. Resolved rings are cached (not promises), so a failed import is retried
// and no request ever awaits a promise that belongs to another request.
const rings = new Map<string, KeyRing>();

/**
 * Parses ENCRYPTION_KEYS: "kid:base64key[,kid:base64key...]"; the first encrypts, all decrypt.
 * Each key must be exactly 32 bytes (base64 or base64url accepted). kid: 1-32 chars
 * [A-Za-z0-9_-]. Throws naming the problem; messages cite entries by position and quote
 * nothing from the value, not even a key id, since a mis-pasted entry (a key split at a
 * colon) can put key material where the id should be.
 */
export async function loadKeyRing(spec: string | undefined): Promise<KeyRing> {
  if (spec === undefined || spec.trim() === "") throw new Error("ENCRYPTION_KEYS is not set");
  const cached = rings.get(spec);
  if (cached) return cached;

  const keys = new Map<string, CryptoKey>();
  let current: string | undefined;
  const entries = spec.split(",");
  for (const [i, raw] of entries.entries()) {
    const where = `ENCRYPTION_KEYS entry ${i + 1} of ${entries.length}`;
    // Trimmed because secrets pasted into `wrangler secret put` often carry a newline.
    const entry = raw.trim();
    const colon = entry.indexOf(":");
    if (colon < 0) throw new Error(`${where}: expected "kid:base64key"`);
    const kid = entry.slice(0, colon);
    if (!KID.test(kid)) throw new Error(`${where}: key id must be 1-32 characters of A-Z a-z 0-9 _ -`);
    if (keys.has(kid)) throw new Error(`${where}: duplicate key id`);
    const bytes = decodeBase64(entry.slice(colon + 1));
    if (!bytes) throw new Error(`${where}: key is not valid base64`);
    if (bytes.length !== 32) throw new Error(`${where}: key must be 32 bytes, got ${bytes.length}`);
    // Non-extractable: nothing holding the CryptoKey can read the key back out.
    keys.set(kid, await crypto.subtle.importKey("raw", bytes, { name: "AES-GCM" }, false, ["encrypt", "decrypt"]));
    current ??= kid;
  }

  const ring: KeyRing = { current: current!, keys };
  rings.set(spec, ring);
  return ring;
}

/**
 * Encrypts a JSON value. `context` (e.g. the job id) is bound as AES-GCM additional data, so a
 * ciphertext copied onto another job fails to open.
 */
export async function seal(ring: KeyRing, value: unknown, context: string): Promise<Sealed> {
  const json = JSON.stringify(value);
  if (json === undefined) throw new TypeError("seal: value is not representable as JSON");
  const key = ring.keys.get(ring.current);
  if (!key) throw new Error(`seal: key ring has no key ${ring.current}`);
  // A random 96-bit IV per seal: GCM breaks if an IV repeats under one key, and at our volume
  // (far below 2^32 seals per key) random IVs keep that probability negligible.
  const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
  const data = await crypto.subtle.encrypt({ name: "AES-GCM", iv, additionalData: utf8(context) }, key, utf8(json));
  return { kid: ring.current, iv: encodeBase64url(iv), data: encodeBase64url(new Uint8Array(data)) };
}

/** Decrypts what `seal` produced under the same context; errors never include plaintext. */
export async function open<T = unknown>(ring: KeyRing, sealed: Sealed, context: string): Promise<T> {
  const key = ring.keys.get(sealed.kid);
  if (!key) throw new Error(`cannot decrypt: unknown key id ${String(sealed.kid).slice(0, 32)}`);
  const iv = typeof sealed.iv === "string" ? decodeBase64(sealed.iv) : null;
  const data = typeof sealed.data === "string" ? decodeBase64(sealed.data) : null;
  if (!iv || iv.length !== IV_BYTES || !data) throw new Error("cannot decrypt: malformed ciphertext");

  let plain: ArrayBuffer;
  try {
    plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv, additionalData: utf8(context) }, key, data);
  } catch {
    // One message for a wrong context, a tampered ciphertext or a wrong key: GCM cannot tell
    // them apart, and the caller should not try to.
    throw new Error("cannot decrypt: ciphertext or context does not match");
  }
  try {
    return JSON.parse(new TextDecoder().decode(plain)) as T;
  } catch {
    // JSON.parse's own message quotes the input, which here is the secret.
    throw new Error("cannot decrypt: plaintext is not JSON");
  }
}

function utf8(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

function encodeBase64url(bytes: Uint8Array): string {
  let binary = "";
  // Char by char rather than String.fromCharCode(...bytes), which overflows the stack on
  // large bodies.
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Standard or URL-safe base64, padded or not; null if it is not base64. */
function decodeBase64(text: string): Uint8Array | null {
  if (!BASE64.test(text) || text.length % 4 === 1) return null;
  const standard = text.replace(/-/g, "+").replace(/_/g, "/").replace(/=+$/, "");
  try {
    const binary = atob(standard.padEnd(Math.ceil(standard.length / 4) * 4, "="));
    return Uint8Array.from(binary, (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}
