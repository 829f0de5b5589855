import type { Context } from "hono";
import { QstashInputError } from "../../qstash/errors";

/** What a /v2 route reads off its request besides headers. */

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * A message's body: its text, or, when it is not UTF-8, its bytes (delivered as they came, kept
 * as the target's `bodyBase64`).
 */
export async function messageBody(c: Context): Promise<string | Uint8Array> {
  const bytes = await c.req.arrayBuffer();
  try {
    return utf8.decode(bytes);
  } catch {
    return new Uint8Array(bytes);
  }
}

/** A body that must be text (JSON of a batch, a queue, a URL group). */
export async function bodyText(c: Context): Promise<string> {
  const bytes = await c.req.arrayBuffer();
  try {
    return utf8.decode(bytes);
  } catch {
    throw new QstashInputError("body", "not valid UTF-8: binary bodies are not supported (docs/qstash.md); send them base64-encoded");
  }
}

/**
 * The path after `prefix` exactly as sent, and the query string that belongs to the
 * destination (the request's, without the `qstash_token` credential).
 */
export function restOfPath(c: Context, prefix: string): { rest: string; search: string } {
  const url = new URL(c.req.url);
  const rest = url.pathname.slice(prefix.length);
  url.searchParams.delete("qstash_token");
  const search = url.searchParams.size > 0 ? `?${url.searchParams}` : "";
  return { rest, search };
}

export const callerIpOf = (c: Context) => c.req.header("CF-Connecting-IP") ?? undefined;

/** A query parameter given once or more (`?messageIds=a&messageIds=b`), or undefined. */
export function many(c: Context, name: string): string[] | undefined {
  const values = c.req.queries(name);
  return values && values.length > 0 ? values : undefined;
}

/**
 * Most ids one bulk call may name (`messageIds`, `dlqIds`): each is looked up on its own, a
 * subrequest or more apiece, and an invocation's subrequests are bounded. The SDK's own bulk
 * calls default to this many; more goes through the filters' `count` and `cursor`.
 */
export const MAX_IDS = 100;

/** A list of ids given once or more, or undefined; more than MAX_IDS is refused before anything is read. */
export function ids(c: Context, name: string): string[] | undefined {
  const values = many(c, name);
  if (values && values.length > MAX_IDS) {
    throw new QstashInputError(
      name,
      `at most ${MAX_IDS} ids in one request (${values.length} given); page through the rest with count and cursor`,
    );
  }
  return values;
}

/**
 * The ids a bulk change names: in the query, as the SDK sends them, or in a JSON body
 * (`{ "dlqIds": [...] }`), as its older `deleteMany` did. Read from both, since a body that
 * names ids and is ignored turns the call into one over the whole filter: every message or dead
 * letter it finds, not the ones named.
 */
export async function bulkIds(c: Context, name: string): Promise<string[] | undefined> {
  const inQuery = ids(c, name);
  if (inQuery) return inQuery;
  const text = await bodyText(c);
  if (text.trim() === "") return undefined;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new QstashInputError("body", `not JSON: send the ids as ?${name}=… or as { "${name}": [...] }`);
  }
  const listed = json !== null && typeof json === "object" ? (json as Record<string, unknown>)[name] : undefined;
  if (listed === undefined) return undefined;
  if (!Array.isArray(listed) || listed.length === 0 || !listed.every((id) => typeof id === "string" && id.length > 0 && id.length <= 200)) {
    throw new QstashInputError(name, "must be a non-empty array of ids");
  }
  if (listed.length > MAX_IDS) {
    throw new QstashInputError(
      name,
      `at most ${MAX_IDS} ids in one request (${listed.length} given); page through the rest with count and cursor`,
    );
  }
  return listed as string[];
}

export function intQuery(c: Context, name: string, min: number, max: number): number | undefined {
  const text = c.req.query(name);
  if (text === undefined || text === "") return undefined;
  if (!/^\d{1,16}$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new QstashInputError(name, `must be a whole number between ${min} and ${max}`);
  }
  return Number(text);
}
