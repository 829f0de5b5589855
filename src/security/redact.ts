/**
 * What the audit log may keep of a value: secrets out, the rest as it was. Sealed fields (a
 * target's headers and body) are marked as such, never copied even sealed; fields whose name
 * says they hold a secret are replaced; URLs keep their origin only: a token is carried in the
 * query or user info, and as often in the path (a Slack webhook's, a Telegram bot's first segment).
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

/** The origin; a path, a query or user info becomes a marker, so the reader knows there was one. */
export function redactUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return REDACTED;
  }
  const userinfo = url.username || url.password ? `${REDACTED}@` : "";
  const path = url.pathname === "/" || url.pathname === "" ? "/" : `/${REDACTED}`;
  return `${url.protocol}//${userinfo}${url.host}${path}${url.search ? `?${REDACTED}` : ""}`;
}
