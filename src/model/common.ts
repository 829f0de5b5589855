import { z } from "@hono/zod-openapi";
import { MAX_RUN_ID_LENGTH } from "./ids";

export const ErrorSchema = z
  .object({
    error: z.object({
      code: z.string().openapi({ example: "invalid_request" }),
      message: z.string(),
      issues: z.array(z.object({ path: z.string().openapi({ example: "schedule.cron" }), message: z.string() })).optional(),
    }),
  })
  .openapi("Error");

export const PageQuery = z.object({
  limit: z.coerce.number().int().min(1).max(200).default(50),
  // A run's page cursor is its instant in base 36 (up to 12), a dot, and its id.
  cursor: z
    .string()
    .max(MAX_RUN_ID_LENGTH + 13)
    .optional(),
});

export function pageOf<T extends z.ZodType>(item: T) {
  return z.object({ items: z.array(item), nextCursor: z.string().nullable() });
}

/**
 * Text that is stored: a lone surrogate is valid in a JS string and in JSON, but D1 and SQLite
 * store UTF-8 and would read it back as U+FFFD, so such a string is refused instead.
 */
export const Text = (max?: number) => {
  const text = max === undefined ? z.string() : z.string().max(max);
  return text.refine((s) => s.isWellFormed(), "must be well-formed Unicode (no lone surrogates)");
};
