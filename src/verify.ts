/**
 * Verifying that a request came from edgecron, for targets to copy or import.
 *
 * Standalone on purpose: it imports nothing and uses only WebCrypto, so it runs unchanged in
 * Node ≥ 20, Workers, Deno and Bun.
 *
 * Two schemes (docs/security.md#verify-signatures):
 * - `Edgecron-Signature-V2` (verifyRequest): one or two JWTs (HS256), separated by ", ", one per
 *   signing secret the tenant has (current and next). The claims cover the method, the exact URL
 *   delivered to, a SHA-256 of the body, the run id, the attempt, the Idempotency-Key, issued-at
 *   and expiry, and a unique `jti` a target may remember to refuse a replay.
 * - `Edgecron-Signature` (verifySignature), the first scheme, kept for a deprecation period per
 *   tenant: `t=<unix seconds>,v1=<hex>[,v1=<hex>...]`, each v1 HMAC-SHA256 over
 *   `${t}.${runId}.${body}`. It covers neither the method, the URL nor the Idempotency-Key, so a
 *   receiver could replay it to the tenant's other endpoints within its window. Edgecron sends it
 *   only beside V2, so verifyRequest never takes it alone: a request carrying it without V2 had
 *   its V2 token stripped, to be sent somewhere V2 would not verify (a downgrade).
 * Both are keyed by the UTF-8 bytes of a signing secret (the `whsec_...` string).
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

// ---- Edgecron-Signature-V2 ----------------------------------------------------------------

export const REQUEST_SIGNATURE_HEADER = "Edgecron-Signature-V2";

/** What a V2 token says about the request it signs. */
export interface RequestClaims {
  iss: "edgecron";
  /** The exact URL the request was sent to, query included. */
  sub: string;
  method: string;
  /** base64url(SHA-256(body)), of the empty string when there is none. */
  body: string;
  run_id: string;
  /** The attempt's number; absent on a notification, which has none. */
  attempt?: number;
  idempotency_key: string;
  iat: number;
  nbf: number;
  exp: number;
  /** Unique per request sent: remember it until `exp` to refuse a replay. */
  jti: string;
}

/** Node's `req.headers` (lower-cased names) or a fetch `Headers`. */
export type HeaderSource = { get(name: string): string | null } | Record<string, string | string[] | undefined>;

export interface VerifyRequestInput {
  method: string;
  /** The full URL the request arrived at, query included (behind a proxy: the public one). */
  url: string;
  headers: HeaderSource;
  /** The exact request body as received ("" when none): its text, or its bytes (a binary body). */
  body: string | Uint8Array;
  /** The secrets to accept, e.g. [current] or, mid-rotation, [current, next]. */
  secrets: string[];
  /** Clock skew allowed on issued-at and expiry, in seconds: default 30. */
  leewaySeconds?: number;
  /**
   * Called with a verified token's `jti` and `exp` (unix seconds); answer true if that jti was
   * seen before (a replay), and remember it until exp. Without it, replays inside the token's
   * five minutes are not detected here (Idempotency-Key still deduplicates them).
   */
  seen?: (jti: string, exp: number) => boolean | Promise<boolean>;
  /**
   * @deprecated Has no effect: a request with the first scheme alone is refused (`legacy_only`),
   * since edgecron sends it only beside V2. A target of a deployment from before V2 calls
   * verifySignature itself, knowing that scheme binds neither the URL nor the method.
   */
  acceptLegacy?: boolean;
  nowMs?: number;
}

export type VerifyRequestResult =
  | { ok: true; scheme: "v2"; claims: RequestClaims }
  | {
      ok: false;
      reason:
        | "missing_header"
        | "legacy_only"
        | "malformed_header"
        | "no_matching_signature"
        | "not_yet_valid"
        | "expired"
        | "url_mismatch"
        | "method_mismatch"
        | "body_mismatch"
        | "header_mismatch"
        | "replayed"
        | "timestamp_outside_window";
    };

/**
 * Checks an Edgecron-Signature-V2 request: a token signed by one of `secrets`, valid now, whose
 * claims match the method, URL, body and edgecron headers the request arrived with, and (with
 * `seen`) not seen before. Throws only for a caller's mistake (no secrets, a relative URL).
 */
export async function verifyRequest(input: VerifyRequestInput): Promise<VerifyRequestResult> {
  const { method, url, headers, body, secrets, leewaySeconds = 30, seen, nowMs = Date.now() } = input;
  if (!Array.isArray(secrets) || secrets.length === 0 || secrets.some((s) => typeof s !== "string" || s === "")) {
    throw new TypeError("verifyRequest: secrets must be a non-empty array of non-empty strings");
  }
  if (typeof body !== "string" && !(body instanceof Uint8Array))
    throw new TypeError("verifyRequest: body must be the raw body, text or bytes");
  let sentTo: URL;
  try {
    sentTo = new URL(url);
  } catch {
    throw new TypeError("verifyRequest: url must be the absolute URL the request arrived at");
  }
  const header = headerOf(headers, REQUEST_SIGNATURE_HEADER);
  if (!header) {
    // Never a fallback: the first scheme binds neither the URL nor the method, so taking it
    // alone would let whoever strips V2 send the request on to another endpoint.
    return { ok: false, reason: headerOf(headers, SIGNATURE_HEADER) ? "legacy_only" : "missing_header" };
  }

  const tokens = header.split(",").map((t) => t.trim());
  const parsed = tokens.map(parseToken);
  if (parsed.some((t) => t === null)) return { ok: false, reason: "malformed_header" };
  let verified: RequestClaims | null = null;
  for (const secret of secrets) {
    for (const token of parsed as ParsedToken[]) {
      const expected = await hmac(secret, encoder.encode(token.signed));
      if (equalBytes(expected, token.signature) && verified === null) verified = token.claims;
    }
  }
  if (verified === null) return { ok: false, reason: "no_matching_signature" };

  const claims = verified;
  const now = Math.floor(nowMs / 1000);
  if (claims.nbf - leewaySeconds > now || claims.iat - leewaySeconds > now) return { ok: false, reason: "not_yet_valid" };
  if (claims.exp + leewaySeconds < now) return { ok: false, reason: "expired" };
  if (!sameUrl(claims.sub, sentTo)) return { ok: false, reason: "url_mismatch" };
  if (claims.method !== method.toUpperCase()) return { ok: false, reason: "method_mismatch" };
  if (claims.body !== (await sha256(body))) return { ok: false, reason: "body_mismatch" };
  // The headers a target acts on must be the ones signed: a changed Idempotency-Key would let a
  // replay through a target's deduplication.
  if (
    headerOf(headers, "X-Edgecron-Run-Id") !== claims.run_id ||
    headerOf(headers, "Idempotency-Key") !== claims.idempotency_key ||
    (claims.attempt !== undefined && headerOf(headers, "X-Edgecron-Attempt") !== String(claims.attempt))
  ) {
    return { ok: false, reason: "header_mismatch" };
  }
  if (seen && (await seen(claims.jti, claims.exp))) return { ok: false, reason: "replayed" };
  return { ok: true, scheme: "v2", claims };
}

interface ParsedToken {
  signed: string;
  signature: Uint8Array;
  claims: RequestClaims;
}

/** A compact JWT with an HS256 header and the claims of a request; null for anything else (`alg: none` included). */
function parseToken(token: string): ParsedToken | null {
  const parts = token.split(".");
  if (parts.length !== 3) return null;
  const [head, payload, signature] = parts as [string, string, string];
  const header = decodeJson(head);
  const claims = decodeJson(payload);
  const bytes = fromBase64url(signature);
  if (header?.alg !== "HS256" || !claims || bytes?.length !== 32) return null;
  const c = claims as Partial<RequestClaims>;
  const strings = [c.sub, c.method, c.body, c.run_id, c.idempotency_key, c.jti];
  const numbers = [c.iat, c.nbf, c.exp];
  if (c.iss !== "edgecron" || strings.some((v) => typeof v !== "string") || numbers.some((v) => !Number.isSafeInteger(v))) return null;
  if (c.attempt !== undefined && !Number.isSafeInteger(c.attempt)) return null;
  return { signed: `${head}.${payload}`, signature: bytes, claims: c as RequestClaims };
}

function decodeJson(part: string): Record<string, unknown> | null {
  const bytes = fromBase64url(part);
  if (!bytes) return null;
  try {
    const value: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes));
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

function fromBase64url(text: string): Uint8Array | null {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) return null;
  try {
    return Uint8Array.from(atob(text.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}

function toBase64url(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

async function sha256(body: string | Uint8Array): Promise<string> {
  return toBase64url(new Uint8Array(await crypto.subtle.digest("SHA-256", typeof body === "string" ? encoder.encode(body) : body)));
}

/** The same URL once parsed: `http://h/p?q` and `HTTP://H:80/p?q` are one; a changed path or query is not. */
function sameUrl(claimed: string, sentTo: URL): boolean {
  try {
    return new URL(claimed).href === sentTo.href;
  } catch {
    return false;
  }
}

function headerOf(headers: HeaderSource, name: string): string | null {
  if (typeof headers.get === "function") return (headers as { get(name: string): string | null }).get(name);
  const value = (headers as Record<string, string | string[] | undefined>)[name.toLowerCase()];
  return Array.isArray(value) ? (value[0] ?? null) : (value ?? null);
}
