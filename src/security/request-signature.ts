/**
 * Edgecron-Signature-V2: a JWT per signing secret over the whole request (src/verify.ts checks
 * it; docs/security.md#verify-signatures describes it). Written by hand rather than with
 * hono/jwt's `sign`: that imports the key on every call, and each delivery signs with two
 * secrets; here the HMAC key is imported once per secret (src/security/signing.ts's cache).
 */
import { REQUEST_SIGNATURE_HEADER, type RequestClaims } from "../verify";
import { base64url, hmacSha256 } from "./signing";

export { REQUEST_SIGNATURE_HEADER };

/** How long a token is valid from its issue: the same five minutes as QStash's. */
const VALID_FOR_S = 300;
const encoder = new TextEncoder();
const HEADER = base64url(encoder.encode(JSON.stringify({ alg: "HS256", typ: "JWT" })));

/** What a request is, as the token states it. */
export interface SignedRequest {
  method: string;
  url: string;
  body: string | Uint8Array | undefined;
  runId: string;
  attempt?: number;
  idempotencyKey: string;
}

/** base64url(SHA-256(body)): of text's UTF-8 bytes, of bytes as they are, of nothing when there is no body. */
export async function bodyDigest(body: string | Uint8Array | undefined): Promise<string> {
  const bytes = typeof body === "string" || body === undefined ? encoder.encode(body ?? "") : body;
  return base64url(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
}

/** The header's value: one token per secret, the same claims (and jti) in each, ", " between. */
export async function requestSignature(secrets: string[], request: SignedRequest, nowMs: number): Promise<string> {
  if (secrets.length === 0) throw new Error("requestSignature: no secrets to sign with");
  const now = Math.floor(nowMs / 1000);
  const claims: RequestClaims = {
    iss: "edgecron",
    sub: new URL(request.url).href,
    method: request.method.toUpperCase(),
    body: await bodyDigest(request.body),
    run_id: request.runId,
    ...(request.attempt !== undefined && { attempt: request.attempt }),
    idempotency_key: request.idempotencyKey,
    iat: now,
    nbf: now,
    exp: now + VALID_FOR_S,
    jti: base64url(crypto.getRandomValues(new Uint8Array(16))),
  };
  const signed = `${HEADER}.${base64url(encoder.encode(JSON.stringify(claims)))}`;
  const tokens = await Promise.all(secrets.map(async (secret) => `${signed}.${base64url(await hmacSha256(secret, signed))}`));
  return tokens.join(", ");
}
