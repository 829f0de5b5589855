import type { TargetSecrets } from "../model/target";
import { REDACTED } from "./redact";

/**
 * What a key without the `write` scope is shown of what is sealed at rest (docs/security.md,
 * "What each scope sees"): no more than stays readable at rest anyway, and enough to tell
 * targets apart and see that a body changed. A `read` key is a dashboard's or a monitor's; it
 * has no need to call a target itself, which a URL's path or query, a header value or a body
 * would let it do. A `write` key sees them whole: it could change them anyway.
 *
 * A URL shows only its origin: a path carries a credential as often as a query does (a chat
 * webhook's path is its token), and the origin is what is stored in the clear already.
 */

/** The origin of a sealed URL; "null" (as URL.origin says of an opaque URL) when it does not parse. */
export function reducedUrl(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return "null";
  }
}

/** A header value as a `read` key sees it: the name stays, the value does not. */
export const HIDDEN_VALUE = REDACTED;

const encoder = new TextEncoder();

/** A target's body as the consumer sends it (src/consumer/execute.ts): bytes, text, or JSON text. */
function sentBytes(secrets: Pick<TargetSecrets, "body" | "bodyBase64">): Uint8Array | undefined {
  if (secrets.bodyBase64 !== undefined) return Uint8Array.from(atob(secrets.bodyBase64), (c) => c.charCodeAt(0));
  if (secrets.body === undefined) return undefined;
  return encoder.encode(typeof secrets.body === "string" ? secrets.body : JSON.stringify(secrets.body));
}

/** A body shown as its size and SHA-256 (hex) as sent: enough to compare with what a target received. */
export async function bodyDigest(
  secrets: Pick<TargetSecrets, "body" | "bodyBase64">,
): Promise<{ bodyBytes: number; bodySha256: string } | undefined> {
  const bytes = sentBytes(secrets);
  if (bytes === undefined) return undefined;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return { bodyBytes: bytes.byteLength, bodySha256: [...digest].map((b) => b.toString(16).padStart(2, "0")).join("") };
}
