import { z } from "@hono/zod-openapi";
import { RUN_STATES } from "../shard/run-states";
import { Instant } from "./job";

export const AttemptSchema = z
  .object({
    attempt: z.int(),
    startedAt: Instant,
    finishedAt: Instant.nullable(),
    outcome: z.enum(["running", "succeeded", "failed", "timed_out", "cancelled"]),
    status: z.int().nullable().openapi({ description: "The target's HTTP status, if it answered." }),
    error: z.string().nullable(),
    durationMs: z.int().nullable(),
  })
  .openapi("Attempt");

export const RunSchema = z
  .object({
    id: z.string().openapi({ example: "run_0mihx2k3f8a1b2c3d4e5_mj3k2a00" }),
    jobId: z.string(),
    jobVersion: z.int(),
    trigger: z.enum(["schedule", "manual"]),
    scheduledAt: Instant,
    state: z.enum(RUN_STATES),
    attempts: z.int().openapi({ description: "Attempts started so far." }),
    startedAt: Instant.nullable(),
    finishedAt: Instant.nullable(),
    status: z.int().nullable().openapi({ description: "HTTP status of the last answer from the target." }),
    error: z.string().nullable(),
    attemptLog: z.array(AttemptSchema).optional(),
  })
  .openapi("Run");
export type Run = z.infer<typeof RunSchema>;
export type Attempt = z.infer<typeof AttemptSchema>;
