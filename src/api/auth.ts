import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { hashKey, tenantOfKey } from "../catalog/tenants";
import { API_KEY } from "../model/ids";
import { gateStub } from "../stubs";
import type { AppEnv } from "./context";
import { ApiError, noSuchRoute } from "./errors";
import { endpointOf } from "./operation";

const encoder = new TextEncoder();
const TOKEN_CALLBACK = /^\/v1\/runs\/[^/]+\/(complete|heartbeat)$/;
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
 * Who is calling: the admin token, or a tenant's API key (looked up by its hash). Hono's
 * bearerAuth answers a malformed header with 400 and a plain-text body; this API promises 401
 * with a JSON body for any missing or wrong credential. The admin token is compared as SHA-256
 * digests in constant time, so neither its length nor its content leaks through timing.
 * What no credential can change is answered before any lookup: a path no route has (the routes
 * are public, in /openapi.json) and a token that is neither the admin token nor of an API
 * key's form, so that junk requests cost no D1 query.
 */
export const authenticate: MiddlewareHandler<AppEnv> = async (c, next) => {
  if (!endpointOf(c)) throw noSuchRoute();
  // A long-running target completes its attempt with the completion token it was given; it
  // holds no API key. Those two routes check that token themselves.
  if (c.req.method === "POST" && TOKEN_CALLBACK.test(c.req.path)) return next();
  const presented = presentedToken(c);
  if (presented === null) throw unauthorized();
  const admin = c.env.API_TOKEN;
  if (admin && (await sameSecret(presented, admin))) {
    c.set("caller", { admin: true });
    return next();
  }
  if (!API_KEY.test(presented)) throw unauthorized();
  const tenant = await tenantOfKey(c.env.DB, await hashKey(presented));
  if (!tenant) throw unauthorized();
  c.set("caller", { admin: false, tenant });
  const rps = tenant.limits.requestsPerSecond;
  if (rps !== null) {
    const { ok, retryAfterMs } = await gateStub(c.env, tenant.id).takeRequest(rps);
    if (!ok) {
      const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
      throw new ApiError(429, "rate_limited", `this tenant may make ${rps} requests per second; retry after the Retry-After seconds`, {
        "Retry-After": String(seconds),
        // What the QStash SDK reads into its QstashRatelimitError (the /v2 surface, docs/qstash.md).
        "Burst-RateLimit-Limit": String(rps),
        "Burst-RateLimit-Remaining": "0",
        "Burst-RateLimit-Reset": String(Math.ceil((Date.now() + retryAfterMs) / 1000)),
      });
    }
  }
  return next();
};

/**
 * The credential presented: `Authorization: Bearer <token>`, or, on the /v2 (QStash) surface
 * only, the `qstash_token` query parameter QStash also takes. Null when there is none of a
 * plausible form.
 */
function presentedToken(c: Context<AppEnv>): string | null {
  const match = /^Bearer\s+(\S{1,200})\s*$/i.exec(c.req.header("Authorization") ?? "");
  if (match) return match[1]!;
  if (!c.req.path.startsWith("/v2/")) return null;
  const query = c.req.query("qstash_token");
  return query !== undefined && /^\S{1,200}$/.test(query) ? query : null;
}

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
export const MAX_MESSAGE_BYTES = 1024 * 1024;
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
