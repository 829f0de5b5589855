import { z } from "@hono/zod-openapi";
import { ATTEMPT_OUTCOMES } from "../shard/attempt-states";
import { RUN_STATES, RUN_TRIGGERS } from "../shard/run-states";
import { Instant } from "./job";

export const AttemptSchema = z
  .object({
    attempt: z.int(),
    startedAt: Instant,
    finishedAt: Instant.nullable(),
    outcome: z.enum(ATTEMPT_OUTCOMES).openapi({ description: "accepted: the target answered 202 and completes through the API." }),
    status: z.int().nullable().openapi({ description: "The target's HTTP status, if it answered." }),
    error: z.string().nullable(),
    durationMs: z.int().nullable(),
    late: z
      .string()
      .nullable()
      .openapi({ description: "An outcome that arrived after this attempt was given up on (a zombie); it changed nothing." }),
  })
  .openapi("Attempt");

export const RunSchema = z
  .object({
    id: z.string().openapi({ example: "run_0mihx2k3f8a1b2c3d4e5_mj3k2a00" }),
    jobId: z.string(),
    jobVersion: z.int(),
    trigger: z.enum(RUN_TRIGGERS),
    scheduledAt: Instant,
    catchUp: z
      .boolean()
      .openapi({ description: "The fire at scheduledAt was missed (job paused, shard down) and this run catches it up." }),
    state: z.enum(RUN_STATES),
    attempts: z.int().openapi({ description: "Attempts started so far." }),
    startedAt: Instant.nullable(),
    finishedAt: Instant.nullable(),
    status: z.int().nullable().openapi({ description: "HTTP status of the last answer from the target." }),
    error: z.string().nullable(),
    result: z.string().nullable().openapi({ description: "What a long-running target sent with its completion." }),
    attemptLog: z.array(AttemptSchema).optional(),
  })
  .openapi("Run");
export type Run = z.infer<typeof RunSchema>;
export type Attempt = z.infer<typeof AttemptSchema>;
