/**
 * Verifying that a request came from edgecron, for targets to copy or import.
 *
 * Standalone on purpose: it imports nothing and uses only WebCrypto, so it runs unchanged in
 * Node ≥ 20, Workers, Deno and Bun.
 *
 * Each request carries `Edgecron-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]` and
 * `X-Edgecron-Run-Id`. Every v1 is HMAC-SHA256, keyed by the UTF-8 bytes of a signing secret
 * (the `whsec_...` string), over `${t}.${runId}.${body}`. Edgecron signs with both the
 * tenant's current and next secret, so a target holding either verifies across a rotation.
 */

export const SIGNATURE_HEADER = "Edgecron-Signature";

export interface VerifyInput {
  /** The Edgecron-Signature header value. */
  header: string | null | undefined;
  /** The X-Edgecron-Run-Id header value. */
  runId: string | null | undefined;
  /** The exact request body as received ("" when none): re-serialized JSON will not verify. */
  body: string;
  /** The secrets to accept, e.g. [current] or, mid-rotation, [current, next]. */
  secrets: string[];
  /** The replay window, both ways: default 300. */
  toleranceSeconds?: number;
  nowMs?: number;
}

export type VerifyResult =
  | { ok: true; timestamp: number }
  | { ok: false; reason: "missing_header" | "malformed_header" | "timestamp_outside_window" | "no_matching_signature" };

const encoder = new TextEncoder();

/**
 * Checks the signature of one request. A missing run id counts as a missing header (the
 * signature covers it). Throws only for a caller's mistake (no secrets, a bad tolerance),
 * so that misconfiguration is loud rather than a stream of rejected requests.
 */
export async function verifySignature(input: VerifyInput): Promise<VerifyResult> {
  const { header, runId, body, secrets, toleranceSeconds = 300, nowMs = Date.now() } = input;
  if (!Array.isArray(secrets) || secrets.length === 0 || secrets.some((s) => typeof s !== "string" || s === "")) {
    throw new TypeError("verifySignature: secrets must be a non-empty array of non-empty strings");
  }
  if (!Number.isFinite(toleranceSeconds) || toleranceSeconds < 0) {
    throw new TypeError("verifySignature: toleranceSeconds must be a non-negative number");
  }
  if (typeof body !== "string") throw new TypeError("verifySignature: body must be the raw body string");
  if (!header || !runId) return { ok: false, reason: "missing_header" };

  const parsed = parseHeader(header);
  if (!parsed) return { ok: false, reason: "malformed_header" };

  // Checked before any HMAC: a replayed request is rejected without the cost of hashing.
  if (Math.abs(Math.floor(nowMs / 1000) - parsed.t) > toleranceSeconds) {
    return { ok: false, reason: "timestamp_outside_window" };
  }

  const message = encoder.encode(`${parsed.t}.${runId}.${body}`);
  let matched = false;
  for (const secret of secrets) {
    const expected = await hmac(secret, message);
    // No early exit: how long verification takes should not depend on which pair matched.
    for (const candidate of parsed.signatures) matched = equalBytes(expected, candidate) || matched;
  }
  return matched ? { ok: true, timestamp: parsed.t } : { ok: false, reason: "no_matching_signature" };
}

/** t and every v1; null unless there is exactly one numeric t and at least one well-formed v1. */
function parseHeader(header: string): { t: number; signatures: Uint8Array[] } | null {
  let t: number | undefined;
  const signatures: Uint8Array[] = [];
  for (const part of header.split(",")) {
    const eq = part.indexOf("=");
    if (eq < 0) return null;
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === "t") {
      if (t !== undefined || !/^\d{1,12}$/.test(value)) return null;
      t = Number(value);
    } else if (key === "v1") {
      if (!/^[0-9a-fA-F]{64}$/.test(value)) return null;
      signatures.push(Uint8Array.from(value.match(/../g)!, (pair) => parseInt(pair, 16)));
    }
    // Other keys (a future v2, a legacy v0) are ignored, so a new scheme can be added alongside.
  }
  return t === undefined || signatures.length === 0 ? null : { t, signatures };
}

async function hmac(secret: string, message: Uint8Array): Promise<Uint8Array> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, message));
}

/**
 * Constant-time equality: `===` on strings or an early-returning loop stops at the first
 * differing byte, and that timing lets an attacker guess a valid signature byte by byte.
 * XOR-ing every byte and checking the total at the end takes the same time wherever they
 * differ. (crypto.subtle.verify would do this too, but only for one expected value per key.)
 */
function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false; // lengths are public (always 32 here)
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}
