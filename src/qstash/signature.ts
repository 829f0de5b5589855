import { sign } from "hono/jwt";

/**
 * Upstash-Signature: the JWT QStash puts on every request it delivers, which the SDK's
 * Receiver checks. HS256 keyed with the signing key's UTF-8 bytes; `iss` "Upstash", `sub` the
 * URL delivered to, valid from now for five minutes, a unique `jti`, and `body` the
 * base64url SHA-256 of the body (of the empty string when there is none).
 */
export const UPSTASH_SIGNATURE = "Upstash-Signature";
const VALID_FOR_S = 300;
const encoder = new TextEncoder();

export function base64url(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export async function bodyHash(body: string | undefined): Promise<string> {
  return base64url(new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(body ?? ""))));
}

export async function upstashSignature(key: string, url: string, body: string | undefined, nowMs: number): Promise<string> {
  const now = Math.floor(nowMs / 1000);
  const jti = `jwt_${base64url(crypto.getRandomValues(new Uint8Array(16)))}`;
  return sign({ iss: "Upstash", sub: url, iat: now, nbf: now, exp: now + VALID_FOR_S, jti, body: await bodyHash(body) }, key, "HS256");
}
