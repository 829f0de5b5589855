import { z } from "@hono/zod-openapi";
import { DEFAULT_BACKOFF } from "../schedule/backoff";

/** What a failed attempt is followed by: a job's, or a workflow step's own. */

export const BackoffSchema = z
  .strictObject({
    initialMs: z
      .int()
      .min(100)
      .max(3_600_000)
      .default(DEFAULT_BACKOFF.initialMs)
      .openapi({ description: "Cap of the first retry's delay." }),
    maxMs: z.int().min(100).max(86_400_000).default(DEFAULT_BACKOFF.maxMs).openapi({ description: "No delay is longer." }),
    factor: z
      .number()
      .min(1)
      .max(10)
      .default(DEFAULT_BACKOFF.factor)
      .openapi({ description: "Each retry's cap is the previous one times this." }),
  })
  .refine((b) => b.maxMs >= b.initialMs, { message: "maxMs must be at least initialMs", path: ["maxMs"] })
  .openapi("Backoff");

export const RetrySchema = z
  .strictObject({
    maxAttempts: z.int().min(1).max(20).default(3).openapi({ description: "Attempts in all, the first included." }),
    backoff: BackoffSchema.default(DEFAULT_BACKOFF),
    jitter: z
      .enum(["full", "none"])
      .default("full")
      .openapi({ description: "full: each delay is uniform in [0, cap], so failures that happened together do not retry together." }),
    retryOn: z
      .array(z.int().min(400).max(499))
      .max(20)
      .optional()
      .openapi({ description: "4xx statuses to retry besides 408 and 429 (5xx, timeouts and network errors always are)." }),
  })
  .openapi("Retry");

export const DEFAULT_RETRY: z.infer<typeof RetrySchema> = { maxAttempts: 3, backoff: DEFAULT_BACKOFF, jitter: "full" };
