/**
 * What the audit log may keep of a value: secrets out, the rest as it was. Sealed fields (a
 * target's headers and body) are marked as such, never copied even sealed; fields whose name
 * says they hold a secret are replaced; URLs keep their origin and path, not their query or
 * user info, which is where a URL carries a token.
 */

const SECRET_NAME = /secret|token|password|passphrase|api[-_]?key|authorization|cookie|credential|signature/i;
export const REDACTED = "[redacted]";

export function redact(value: unknown, name = ""): unknown {
  if (value === null || value === undefined) return value;
  if (name === "secrets") return "[sealed]";
  if (SECRET_NAME.test(name)) return REDACTED;
  if (typeof value === "string") return name === "url" ? redactUrl(value) : value;
  if (Array.isArray(value)) return value.map((v) => redact(v, name));
  if (typeof value === "object") {
    // A headers object's values are all secret-like: they carry credentials as often as not.
    if (name === "headers") return Object.fromEntries(Object.keys(value).map((k) => [k, REDACTED]));
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redact(v, k)]));
  }
  return value;
}

/** Origin and path; a query or user info becomes a marker, so the reader knows there was one. */
export function redactUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return REDACTED;
  }
  const userinfo = url.username || url.password ? `${REDACTED}@` : "";
  return `${url.protocol}//${userinfo}${url.host}${url.pathname}${url.search ? `?${REDACTED}` : ""}`;
}
