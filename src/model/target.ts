import { z } from "@hono/zod-openapi";
import type { QstashMeta } from "../qstash/meta";
import type { Sealed } from "../security/sealing";
import { Text } from "./common";

/** A target: where a job (or a workflow step) calls, and what it sends. */

export const HTTP_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Set by edgecron on every request; a job may not override them. */
export const RESERVED_HEADERS = [
  "idempotency-key",
  "x-edgecron-run-id",
  "x-edgecron-attempt",
  "x-edgecron-scheduled-at",
  "x-edgecron-job-id",
  "x-edgecron-completion-token",
  "x-edgecron-complete-url",
  "x-edgecron-step",
  "edgecron-signature",
  "edgecron-signature-v2",
];

/**
 * The client's address as a proxy reports it. A job may not send them: a target (edgecron's own
 * API among them, whose audit log records the client) may trust them, and a job could forge them.
 */
export const CLIENT_ADDRESS_HEADERS = ["x-forwarded-for", "x-real-ip", "cf-connecting-ip", "true-client-ip", "forwarded"];

/** Bounds on what a target may carry, checked before anything is stored. */
export const TARGET_LIMITS = { headers: 50, headerValueChars: 8_192, headerBytes: 32_768, bodyDepth: 32 };

/** Nesting depth of a JSON value, without recursion (a hostile body must not blow the stack). */
export function jsonDepth(value: unknown): number {
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    deepest = Math.max(deepest, depth);
    if (depth > TARGET_LIMITS.bodyDepth) break;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return deepest;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Why a header cannot be sent as given, or null. Values must be Latin-1: fetch refuses others. */
function headerProblem(name: string, value: unknown): string | null {
  if (name.length > 256 || !HEADER_NAME.test(name) || name === "__proto__") return "not a valid HTTP header name";
  if (RESERVED_HEADERS.includes(name.toLowerCase())) return `${name} is set by edgecron on every request`;
  if (CLIENT_ADDRESS_HEADERS.includes(name.toLowerCase()))
    return `${name} names the client's address, which a target may trust: a job may not set it`;
  if (typeof value !== "string") return "must be a string";
  if (value.length > TARGET_LIMITS.headerValueChars) return `must be at most ${TARGET_LIMITS.headerValueChars} characters`;
  if (/[\r\n\0]/.test(value)) return "a header value may not contain CR, LF or NUL";
  if (/[^\t\x20-\x7e\x80-\xff]/.test(value)) return "a header value must be Latin-1 text without control characters";
  return null;
}

/** Where a job calls or notifies: the SSRF guard (src/security/target-guard.ts) then checks the address. */
export const HttpUrl = z.url({ protocol: /^https?$/, error: "must be an absolute http or https URL" }).max(2048);

export const TargetSchema = z
  .strictObject({
    url: HttpUrl.openapi({ example: "https://example.com/hooks/report" }),
    method: z.enum(HTTP_METHODS).default("POST"),
    // Checked by hand rather than with z.record, which drops a "__proto__" key silently (it
    // rebuilds the object); here every own key of the parsed JSON is seen, and refused or kept.
    headers: z
      .custom<Record<string, string>>(isPlainObject, "must be an object of header names to string values")
      .openapi({ type: "object", additionalProperties: { type: "string" } })
      .superRefine((headers, ctx) => {
        const names = Object.keys(headers);
        if (names.length > TARGET_LIMITS.headers) ctx.addIssue({ code: "custom", message: `at most ${TARGET_LIMITS.headers} headers` });
        let chars = 0;
        for (const name of names) {
          const value: unknown = headers[name];
          chars += name.length + (typeof value === "string" ? value.length : 0);
          const problem = headerProblem(name, value);
          if (problem) ctx.addIssue({ code: "custom", message: problem, path: [name] });
        }
        if (chars > TARGET_LIMITS.headerBytes)
          ctx.addIssue({ code: "custom", message: `names and values may add up to at most ${TARGET_LIMITS.headerBytes} characters` });
      })
      .optional()
      .openapi({ description: "Stored encrypted; responses show the names only." }),
    body: z
      .union([
        Text(),
        z.array(z.unknown()),
        z.custom<Record<string, unknown>>(isPlainObject, "must be a string, an array or an object").openapi({ type: "object" }),
      ])
      .refine((b) => jsonDepth(b) <= TARGET_LIMITS.bodyDepth, `may nest at most ${TARGET_LIMITS.bodyDepth} levels deep`)
      .optional()
      .openapi({ description: "A string is sent as is; JSON is sent as application/json. Stored encrypted." }),
    bodyBase64: z.base64({ error: "must be base64 (the standard alphabet, padded)" }).optional().openapi({
      description:
        "A binary body, base64-encoded: sent as those bytes (application/octet-stream unless a Content-Type header says otherwise). Stored encrypted. Instead of `body`.",
    }),
  })
  .superRefine((t, ctx) => {
    for (const field of ["body", "bodyBase64"] as const) {
      if (t[field] !== undefined && t.method === "GET")
        ctx.addIssue({ code: "custom", message: "a GET request has no body", path: [field] });
    }
    if (t.body !== undefined && t.bodyBase64 !== undefined) {
      ctx.addIssue({ code: "custom", message: "give body or bodyBase64, not both", path: ["bodyBase64"] });
    }
  })
  .openapi("Target");
export type Target = z.infer<typeof TargetSchema>;

/** The secret part of a target, sealed (AES-GCM) in D1 and in shard storage alike. */
export interface TargetSecrets {
  /**
   * The whole URL: paths and queries carry tokens as often as headers do (a chat webhook's
   * path is its credential). Absent only in what was sealed before URLs were.
   */
  url?: string;
  headers?: Record<string, string>;
  body?: Target["body"];
  /** A binary body (`Target.bodyBase64`). */
  bodyBase64?: string;
}

/**
 * A target as stored: what routing needs in the clear (the origin keys the circuit breaker),
 * the rest sealed, the URL included. A target stored before URLs were sealed still has `url`
 * (and no `origin`) until the sweep seals it again (src/reconcile/resealing.ts); read both
 * through `originOf` and `openTarget` (src/security/targets.ts), never directly.
 */
export interface StoredTarget {
  /** Scheme, host and port of the URL: what a breaker is keyed on and what a log line may show. */
  origin?: string;
  /** Only in a target stored before URLs were sealed. */
  url?: string;
  method: Target["method"];
  headerNames: string[];
  /** Null only in a target stored before URLs were sealed that had no headers or body. */
  secrets: Sealed | null;
  /** A message or schedule of the /v2 (QStash) surface: delivered as QStash does (src/qstash/delivery.ts). */
  qstash?: QstashMeta;
}

/**
 * The origin of a stored target's URL, which stays readable: the breaker's key, and what logs
 * show of it. "null" (as URL.origin says of an opaque URL) when there is none to read.
 */
export function originOf(target: { origin?: string; url?: string }): string {
  if (target.origin !== undefined) return target.origin;
  try {
    return new URL(target.url ?? "").origin;
  } catch {
    return "null";
  }
}

/** Says that a view is a `read` key's, what is sealed reduced (src/security/reduced.ts). */
export const Reduced = z.literal(true).optional().openapi({
  description:
    "Present when the key lacks the `write` scope: `url` is the URL's origin only, and a body is shown by its size and SHA-256 (docs/security.md).",
});

/** A target as responses show it: header names, never their values; to a `read` key, its URL's origin and its body's digest. */
export const TargetViewSchema = z
  .object({
    url: z.string(),
    method: z.enum(HTTP_METHODS),
    headerNames: z.array(z.string()),
    body: TargetSchema.shape.body,
    bodyBase64: z.string().optional(),
    bodyBytes: z.int().optional().openapi({ description: "Instead of the body, to a key without `write`: its size as sent." }),
    bodySha256: z
      .string()
      .optional()
      .openapi({ description: "Instead of the body, to a key without `write`: the SHA-256 (hex) of the body as sent." }),
    reduced: Reduced,
  })
  .openapi("TargetView");
export type TargetView = z.infer<typeof TargetViewSchema>;
