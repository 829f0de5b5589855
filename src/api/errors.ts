import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { ZodError } from "zod";
import { CatalogUnavailable } from "../catalog/d1";
import { Misconfigured } from "../config";
import { QstashInputError } from "../qstash/errors";

/** The one error type handlers throw; `onError` turns it (and anything else) into the JSON body. */
export class ApiError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
    readonly issues?: Issue[],
  ) {
    super(message);
  }
}

/** A 400 about one field, shaped like a validation failure. */
export const invalidField = (path: string, message: string) =>
  new ApiError(400, "invalid_request", `${path}: ${message}`, {}, [{ path, message }]);

export const notFound = (what: string, id: string) => new ApiError(404, "not_found", `no ${what} with id ${id}`);
export const noSuchRoute = () => new ApiError(404, "not_found", "no such route");

export interface Issue {
  path: string;
  message: string;
}

export function issuesOf(error: ZodError): Issue[] {
  return error.issues.map((issue) => ({
    path: issue.path.map(String).join(".") || "(body)",
    message: issue.message,
  }));
}

/** 400 for a request that failed validation: every issue with the field it concerns. */
export function validationResponse(c: Context, error: ZodError) {
  const issues = issuesOf(error);
  const message = issues.map((i) => `${i.path}: ${i.message}`).join("; ");
  return c.json({ error: { code: "invalid_request", message, issues } }, 400);
}

const CODES: Partial<Record<number, string>> = {
  400: "bad_request",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  413: "payload_too_large",
  415: "unsupported_media_type",
};

interface Described {
  status: ContentfulStatusCode;
  code: string;
  message: string;
  headers?: Record<string, string>;
  issues?: Issue[];
}

function describe(err: Error): Described {
  if (err instanceof ApiError)
    return { status: err.status, code: err.code, message: err.message, headers: err.headers, issues: err.issues };
  if (err instanceof QstashInputError)
    return { status: err.status, code: err.status === 404 ? "not_found" : "invalid_request", message: err.message };
  if (err instanceof CatalogUnavailable) {
    console.error(err.message);
    return {
      status: 503,
      code: "catalog_unavailable",
      message: "the job catalog (D1) is unavailable; scheduled runs go on; retry this request",
      headers: { "Retry-After": "5" },
    };
  }
  if (err instanceof Misconfigured) {
    console.error(`misconfigured: ${err.message}`);
    return { status: 500, code: "misconfigured", message: `the server is misconfigured: ${err.message}` };
  }
  if (err instanceof HTTPException) {
    // Hono's own rejections (malformed JSON, …) get the same JSON shape as ours.
    const status = err.status as ContentfulStatusCode;
    return { status, code: CODES[status] ?? "error", message: err.message || "request rejected" };
  }
  console.error("unhandled error", err);
  return { status: 500, code: "internal", message: "internal error" };
}

/** The /v2 (QStash) surface answers errors as QStash does, `{ "error": "…" }`, which its SDK shows as the message. */
const isQstashPath = (path: string) => path === "/v2" || path.startsWith("/v2/");

export function errorResponse(err: Error, c: Context): Response {
  const { status, code, message, headers = {}, issues } = describe(err);
  for (const [name, value] of Object.entries(headers)) c.header(name, value);
  if (isQstashPath(c.req.path)) return c.json({ error: message }, status);
  return c.json({ error: { code, message, ...(issues && { issues }) } }, status);
}
