import { z } from "@hono/zod-openapi";
import { ErrorSchema } from "../model/common";
import { MAX_RUN_ID_LENGTH } from "../model/ids";
import type { ErrorCase } from "./error-cases";

/** Pieces every route declaration repeats. */

export const json = <T extends z.ZodType>(schema: T, description: string) => ({ content: { "application/json": { schema } }, description });

/** A named example of a request body, typed by its schema (the refinements are checked by test/workerd/api-docs.test.ts). */
export interface Example<T> {
  summary: string;
  value: T;
}

/** A required JSON request body and its examples, which the API reference (/docs) shows and fills in its test requests. */
export const jsonBody = <T extends z.ZodType>(schema: T, examples: Record<string, Example<z.input<T>>>, required = true) => ({
  content: { "application/json": { schema, examples } },
  required,
});

/**
 * A route's error responses: the cases grouped by status, each status described by its cases
 * and carrying one example body per case, with the headers its cases send (Retry-After…).
 */
export const errors = (...cases: Array<ErrorCase | ErrorCase[]>) => {
  const all = [...new Set(cases.flat())];
  const names = all.map((c) => `${c.error.status} ${c.name}`);
  const twice = names.find((name, i) => names.indexOf(name) !== i);
  // Examples are keyed by name: a second case of the same name would silently replace the first.
  if (twice) throw new Error(`two error cases named ${twice}`);
  const byStatus = Map.groupBy(all, (c) => c.error.status);
  const sorted = [...byStatus].sort(([a], [b]) => a - b);
  return Object.fromEntries(sorted.map(([status, list]) => [status, errorResponse(list)]));
};

function errorResponse(list: ErrorCase[]) {
  const lines = list.map((c) => `\`${c.error.code}\`: ${c.when}`);
  const examples = Object.fromEntries(
    list.map(({ name, when, error }) => [
      name,
      { summary: when, value: { error: { code: error.code, message: error.message, ...(error.issues && { issues: error.issues }) } } },
    ]),
  );
  const headerNames = [...new Set(list.flatMap((c) => Object.keys(c.error.headers)))];
  return {
    description: lines.length === 1 ? lines[0]! : lines.map((line) => `- ${line}`).join("\n"),
    content: { "application/json": { schema: ErrorSchema, examples } },
    ...(headerNames.length > 0 && {
      headers: Object.fromEntries(headerNames.map((name) => [name, { schema: { type: "string" as const }, description: HEADERS[name] }])),
    }),
  };
}

const HEADERS: Record<string, string> = {
  ETag: "The job's entity tag, from its version: send it in If-Match to change the job only as it is.",
  "Retry-After": "Seconds to wait before retrying.",
  "WWW-Authenticate": "The scheme to authenticate with: Bearer.",
};

/** A success answer that carries the job's ETag (src/app/job-etag.ts). */
export const withEtag = <T extends { description: string }>(response: T) => ({
  ...response,
  headers: { ETag: { schema: { type: "string" as const }, description: HEADERS.ETag } },
});

export const bearer = [{ bearer: [] }];

export const pathId = (example: string) =>
  z.object({
    id: z
      .string()
      .max(MAX_RUN_ID_LENGTH)
      .openapi({ param: { name: "id", in: "path" }, example }),
  });

export const tenantParam = z.object({
  id: z
    .string()
    .max(100)
    .openapi({ param: { name: "id", in: "path" }, example: "ten_0123456789abcdefghij" }),
});
