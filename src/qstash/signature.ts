import { sign } from "hono/jwt";
import { bodyDigest } from "../security/request-signature";
import { base64url } from "../security/signing";

/**
 * Upstash-Signature: the JWT QStash puts on every request it delivers, which the SDK's
 * Receiver checks. HS256 keyed with the signing key's UTF-8 bytes; `iss` "Upstash", `sub` the
 * URL delivered to, valid from now for five minutes, a unique `jti`, and `body` the
 * base64url SHA-256 of the body (of the empty string when there is none).
 */
export const UPSTASH_SIGNATURE = "Upstash-Signature";
const VALID_FOR_S = 300;

export async function upstashSignature(key: string, url: string, body: string | Uint8Array | undefined, nowMs: number): Promise<string> {
  const now = Math.floor(nowMs / 1000);
  const jti = `jwt_${base64url(crypto.getRandomValues(new Uint8Array(16)))}`;
  return sign({ iss: "Upstash", sub: url, iat: now, nbf: now, exp: now + VALID_FOR_S, jti, body: await bodyDigest(body) }, key, "HS256");
}
