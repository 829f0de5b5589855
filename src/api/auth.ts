import type { MiddlewareHandler } from "hono";
import type { Env } from "../env";
import { ApiError } from "./errors";

const encoder = new TextEncoder();
const TOKEN_CALLBACK = /^\/v1\/runs\/[^/]+\/(complete|heartbeat)$/;

/**
 * Bearer-token check for /v1. Hono's bearerAuth answers a malformed header with 400 and a
 * plain-text body; this API promises 401 with a JSON body for any missing or wrong token.
 * Tokens are compared as SHA-256 digests with a constant-time compare, so neither length nor
 * content leaks through timing.
 */
export const requireToken: MiddlewareHandler<{ Bindings: Env }> = async (c, next) => {
  // A long-running target completes its attempt with the completion token it was given; it
  // holds no API token. Those two routes check that token themselves.
  if (c.req.method === "POST" && TOKEN_CALLBACK.test(c.req.path)) return next();
  const header = c.req.header("Authorization") ?? "";
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  const expected = c.env.API_TOKEN;
  if (!match || !expected || !(await sameSecret(match[1]!, expected))) {
    throw new ApiError(401, "unauthorized", "send Authorization: Bearer <API token>", { "WWW-Authenticate": 'Bearer realm="edgecron"' });
  }
  await next();
};

async function sameSecret(a: string, b: string): Promise<boolean> {
  const [da, db] = await Promise.all([a, b].map((s) => crypto.subtle.digest("SHA-256", encoder.encode(s))));
  return crypto.subtle.timingSafeEqual(da!, db!);
}

/** Bodies must be JSON: a form-encoded body (curl -d without a header) would otherwise look empty. */
export const requireJsonBody: MiddlewareHandler = async (c, next) => {
  const length = c.req.header("Content-Length");
  const hasBody = (length !== undefined && length !== "0") || c.req.header("Transfer-Encoding") !== undefined;
  const type = (c.req.header("Content-Type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (hasBody && ["POST", "PUT", "PATCH"].includes(c.req.method) && type !== "application/json") {
    throw new ApiError(415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json");
  }
  await next();
};
