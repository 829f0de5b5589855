import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { ZodError } from "zod";
import { CatalogUnavailable } from "../catalog/d1";
import { Misconfigured } from "../config";

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

export function errorResponse(err: Error, c: Context): Response {
  if (err instanceof ApiError) {
    for (const [name, value] of Object.entries(err.headers)) c.header(name, value);
    return c.json({ error: { code: err.code, message: err.message, ...(err.issues && { issues: err.issues }) } }, err.status);
  }
  if (err instanceof CatalogUnavailable) {
    console.error(err.message);
    c.header("Retry-After", "5");
    return c.json(
      { error: { code: "catalog_unavailable", message: "the job catalog (D1) is unavailable; scheduled runs go on; retry this request" } },
      503,
    );
  }
  if (err instanceof Misconfigured) {
    console.error(`misconfigured: ${err.message}`);
    return c.json({ error: { code: "misconfigured", message: `the server is misconfigured: ${err.message}` } }, 500);
  }
  if (err instanceof HTTPException) {
    // Hono's own rejections (malformed JSON, …) get the same JSON shape as ours.
    const status = err.status as ContentfulStatusCode;
    return c.json({ error: { code: CODES[status] ?? "error", message: err.message || "request rejected" } }, status);
  }
  console.error("unhandled error", err);
  return c.json({ error: { code: "internal", message: "internal error" } }, 500);
}
