import type { MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { grantOf } from "../app/caller";
import { takeRequest } from "../app/request-rate";
import { adminTokens } from "../config";
import { API_KEY } from "../model/ids";
import { grants } from "../model/scopes";
import type { AppContext, AppEnv } from "./context";
import { ApiError, noSuchRoute } from "./errors";
import { endpointOf } from "./operation";
import { accessOf } from "./route-scopes";
import { failedSignIn, liveKeyOf, throttleNames } from "./sign-in-throttle";

const encoder = new TextEncoder();
/** Largest request body the API reads; a job definition is a few KiB. */
export const MAX_BODY_BYTES = 256 * 1024;
/** A batch create's (POST /v1/jobs/batch): its 1,000 jobs at 4 KiB each. */
export const MAX_BATCH_BODY_BYTES = 4 * 1024 * 1024;
const BATCH_PATH = "/v1/jobs/batch";

const unauthorized = () =>
  new ApiError(401, "unauthorized", "send Authorization: Bearer <API key or admin token>", {
    "WWW-Authenticate": 'Bearer realm="edgecron"',
  });

/**
 * Who is calling: the admin token (current or next, while it is rotated), or a tenant's API key
 * (looked up by its hash). Hono's bearerAuth answers a malformed header with 400 and a plain-text
 * body; this API promises 401 with a JSON body for any missing or wrong credential. The admin
 * token is compared as SHA-256 digests in constant time, so neither its length nor its content
 * leaks through timing. A path no route has (the routes are public, in /openapi.json) is answered
 * before any lookup, and a token that is neither the admin token nor of an API key's form is never
 * looked up, so such junk costs no D1 query. Only a credential missing or found wrong counts
 * against, and is refused by, the sign-in throttle (sign-in-throttle.ts): a valid one always passes.
 */
export const authenticate: MiddlewareHandler<AppEnv> = async (c, next) => {
  const endpoint = endpointOf(c);
  if (!endpoint) throw noSuchRoute();
  // A long-running target completes its attempt with the completion token it was given; it
  // holds no API key. Those two routes check that token themselves.
  if (accessOf(endpoint) === "completion-token") return next();
  const from = c.req.header("CF-Connecting-IP") ?? null;
  const presented = presentedToken(c) ?? undefined;
  const isKey = presented !== undefined && API_KEY.test(presented);
  const names = throttleNames(c, isKey ? presented.slice(0, KEY_PREFIX_LENGTH) : null);
  if (presented === undefined) throw await failedSignIn(c, names, unauthorized());
  const admin = await adminTokenOf(c, presented);
  if (admin) {
    c.set("caller", { admin: true, ...(admin === "next" && { next: true }), from });
    return next();
  }
  const found = isKey ? await liveKeyOf(c, presented) : null;
  if (!found) throw await failedSignIn(c, names, unauthorized());
  const { tenant, key } = found;
  c.set("caller", { admin: false, tenant, key, from });
  await takeRequest(c.env, tenant);
  return next();
};

/**
 * The credential presented: `Authorization: Bearer <token>`, or, on the /v2 (QStash) surface
 * only, the `qstash_token` query parameter QStash also takes. Null when there is none of a
 * plausible form.
 */
function presentedToken(c: AppContext): string | null {
  const match = /^Bearer\s+(\S{1,200})\s*$/i.exec(c.req.header("Authorization") ?? "");
  if (match) return match[1]!;
  if (!c.req.path.startsWith("/v2/")) return null;
  const query = c.req.query("qstash_token");
  return query !== undefined && /^\S{1,200}$/.test(query) ? query : null;
}

/**
 * The /v2 (QStash) surface: each route by its row of the scope table, as /v1 (`authorize`). A
 * key limited to a prefix of job names may use none of it: its messages, schedules and queues
 * are not named jobs, so no prefix could hold for them.
 */
export const authorizeQstash: MiddlewareHandler<AppEnv> = async (c, next) => {
  const { jobPrefix } = grantOf(c.var.caller);
  if (jobPrefix !== null) {
    throw new ApiError(
      403,
      "insufficient_scope",
      `this key is limited to jobs named "${jobPrefix}…"; the QStash API's messages and schedules are not named jobs, so it needs a key for the whole tenant`,
    );
  }
  return authorize(c, next);
};

/** The key's first characters, its public prefix (src/app/tenants.ts, mintKey): what failures are also counted by. */
const KEY_PREFIX_LENGTH = 7;

/** Which admin token this is, if any (API_TOKEN_NEXT is set only while the token is rotated: docs/security.md). */
async function adminTokenOf(c: AppContext, presented: string): Promise<"current" | "next" | null> {
  const { current, next } = adminTokens(c.env);
  // Both are compared, whichever matches, so the time taken does not say which one it was.
  const [isCurrent, isNext] = await Promise.all([current, next].map((t) => (t ? sameSecret(presented, t) : Promise.resolve(false))));
  return isCurrent ? "current" : isNext ? "next" : null;
}

/**
 * The caller may use the route it reached: its key holds the scope the route table names
 * (route-scopes.ts), and a key limited to a prefix of job names reaches only per-job routes.
 * A route the table does not name is refused to everyone: a route added without a scope must
 * fail closed, and its test says which.
 */
export const authorize: MiddlewareHandler<AppEnv> = async (c, next) => {
  const endpoint = endpointOf(c);
  const access = endpoint && accessOf(endpoint);
  if (access === "completion-token") return next();
  if (!access) throw new ApiError(403, "forbidden", "this route declares no scope, so no credential may use it");
  const grant = grantOf(c.var.caller);
  if (!grants(grant.scopes, access.scope)) {
    throw new ApiError(403, "insufficient_scope", `this route needs the "${access.scope}" scope; this key has ${grant.scopes.join(", ")}`, {
      "WWW-Authenticate": `Bearer realm="edgecron", error="insufficient_scope", scope="${access.scope}"`,
    });
  }
  if (grant.jobPrefix !== null && !access.perJob) {
    throw new ApiError(
      403,
      "insufficient_scope",
      `this key is limited to jobs named "${grant.jobPrefix}…"; this route concerns the whole tenant`,
    );
  }
  return next();
};

async function sameSecret(a: string, b: string): Promise<boolean> {
  const [da, db] = await Promise.all([a, b].map((s) => crypto.subtle.digest("SHA-256", encoder.encode(s))));
  return crypto.subtle.timingSafeEqual(da!, db!);
}

const limitTo = (maxSize: number) =>
  bodyLimit({
    maxSize,
    onError: () => {
      throw new ApiError(413, "payload_too_large", `the request body may be at most ${maxSize} bytes`);
    },
  });
const limits = { one: limitTo(MAX_BODY_BYTES), batch: limitTo(MAX_BATCH_BODY_BYTES) };

/** A QStash message's body: QStash's own limit for a message, 1 MiB. */
const MAX_MESSAGE_BYTES = 1024 * 1024;
/** The /v2 surface's bodies: a message (or a batch of them) of any content type. */
export const limitQstashBody = limitTo(MAX_MESSAGE_BYTES);

/** Bodies larger than MAX_BODY_BYTES (a batch's: MAX_BATCH_BODY_BYTES) are refused before they are read whole (413). */
export const limitBody: MiddlewareHandler<AppEnv> = (c, next) => (c.req.path === BATCH_PATH ? limits.batch : limits.one)(c, next);

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/**
 * Bodies must be JSON in valid UTF-8. A form-encoded body (curl -d without a header) would
 * otherwise look empty, and invalid UTF-8 would be stored with replacement characters that
 * the client never sent. Reading the body here caches it for the route's validator.
 */
export const requireJsonBody: MiddlewareHandler<AppEnv> = async (c, next) => {
  if (!["POST", "PUT", "PATCH"].includes(c.req.method)) return next();
  const length = c.req.header("Content-Length");
  const hasBody = (length !== undefined && length !== "0") || c.req.header("Transfer-Encoding") !== undefined;
  if (!hasBody) return next();
  const type = (c.req.header("Content-Type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/json") {
    throw new ApiError(415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json");
  }
  try {
    utf8.decode(await c.req.arrayBuffer());
  } catch (err) {
    if (err instanceof ApiError) throw err;
    throw new ApiError(400, "invalid_request", "(body): not valid UTF-8");
  }
  return next();
};
