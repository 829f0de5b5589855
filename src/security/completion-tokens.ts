/**
 * The completion token as a target holds it: the shard's token (`newCompletionToken`: shard,
 * fence, a random part) and a MAC over all of it, made by the consumer that sends the request.
 *
 * The shard's token names its shard so that the API reaches the run without D1
 * (docs/architecture.md, invariant 7); but a name is a pattern anyone can fill in, and a
 * Durable Object addressed by name comes into being, and runs its migrations, when first
 * called. The MAC lets the Worker refuse a token it did not issue before any object is touched;
 * the shard still compares the whole of its own part with what it stored (invariant 4).
 *
 * The key is HMAC-SHA256(SIGNING_SECRET, COMPLETION_KEY_LABEL). Tenants' signing secrets are
 * HMACs of the same master over `${tenantId}:${generation}` (signing.ts), which always hold a
 * colon followed by digits; the label has no colon, so no tenant's secret is this key.
 */
import { Misconfigured } from "../config";
import { parseCompletionToken } from "../model/ids";

const COMPLETION_KEY_LABEL = "edgecron completion tokens";
const MIN_MASTER_LENGTH = 32;
/** base64url of a 32-byte HMAC-SHA256, unpadded. */
const MAC = /^[A-Za-z0-9_-]{43}$/;
const encoder = new TextEncoder();

// One master per deployment, at most two during a change of the secret: a tiny cache.
const keys = new Map<string, Promise<CryptoKey>>();

function keyOf(master: string): Promise<CryptoKey> {
  if (typeof master !== "string" || master.length < MIN_MASTER_LENGTH) {
    throw new Misconfigured(`SIGNING_SECRET is missing or shorter than ${MIN_MASTER_LENGTH} characters`);
  }
  let key = keys.get(master);
  if (!key) {
    key = derive(master);
    if (keys.size >= 4) keys.clear();
    keys.set(master, key);
    // A failed derivation is not kept: the next call tries again.
    key.catch(() => keys.delete(master));
  }
  return key;
}

async function derive(master: string): Promise<CryptoKey> {
  const hmac = { name: "HMAC", hash: "SHA-256" } as const;
  const masterKey = await crypto.subtle.importKey("raw", encoder.encode(master), hmac, false, ["sign"]);
  const raw = await crypto.subtle.sign("HMAC", masterKey, encoder.encode(COMPLETION_KEY_LABEL));
  return crypto.subtle.importKey("raw", raw, hmac, false, ["sign", "verify"]);
}

/** The token a target is given for the shard's `token`. */
export async function signCompletionToken(master: string, token: string): Promise<string> {
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", await keyOf(master), encoder.encode(token)));
  return `${token}.${base64url(mac)}`;
}

/**
 * The shard's token and its shard when `presented` carries this deployment's MAC over it, else
 * null: a forged, altered or truncated token, or one issued before tokens carried a MAC (an
 * attempt's token lives no longer than the attempt, so those are refused rather than let
 * through unchecked; such an attempt times out and is retried).
 */
export async function verifyCompletionToken(master: string, presented: string): Promise<{ token: string; shard: string } | null> {
  const dot = presented.lastIndexOf(".");
  const token = presented.slice(0, dot);
  const mac = presented.slice(dot + 1);
  const parsed = dot > 0 ? parseCompletionToken(token) : null;
  if (!parsed || !MAC.test(mac)) return null;
  // subtle.verify compares in constant time.
  const ok = await crypto.subtle.verify("HMAC", await keyOf(master), fromBase64url(mac), encoder.encode(token));
  return ok ? { token, shard: parsed.shard } : null;
}

function base64url(bytes: Uint8Array): string {
  return btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
}

function fromBase64url(text: string): Uint8Array {
  const binary = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}
