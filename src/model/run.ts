import { z } from "@hono/zod-openapi";
import { ATTEMPT_OUTCOMES } from "./attempt-states";
import { Instant } from "./job";
import { RUN_STATES, RUN_TRIGGERS } from "./run-states";

const AttemptSchema = z
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

/** One step of a workflow run (docs/workflows.md). */
const StepRunSchema = z
  .object({
    id: z.string().openapi({ description: "The step's id in the job's steps." }),
    state: z.enum([...RUN_STATES, "blocked"]).openapi({ description: "blocked: not started, waiting for its parents." }),
    attempt: z.int().openapi({ description: "The current attempt's number (0 while blocked)." }),
    status: z.int().nullable(),
    startedAt: Instant.nullable(),
    finishedAt: Instant.nullable(),
    result: z.unknown().optional().openapi({
      description:
        "A succeeded step's result, as the steps below receive it: its response body (JSON when it parses, else text) or its 202 completion's result.",
    }),
    error: z.string().nullable(),
    attemptLog: z.array(AttemptSchema),
  })
  .openapi("StepRun");

export const RunSchema = z
  .object({
    id: z.string().openapi({ example: "run_0mihx2k3f8a1b2c3d4e5_mj3k2a00" }),
    jobId: z.string(),
    jobVersion: z.int(),
    trigger: z.enum([...RUN_TRIGGERS, "chain"]).openapi({
      description:
        "What made the run: its schedule, a person (trigger), a backfill, or a run of another job that ended (chain: see chainedFrom).",
    }),
    chainedFrom: z.string().optional().openapi({ description: "For a chained run: the run whose end triggered it (onSuccess/onFailure)." }),
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
    steps: z.array(StepRunSchema).optional().openapi({
      description: "A workflow run read alone: every step of its job, in definition order. The run has no attempts of its own.",
    }),
  })
  .openapi("Run");
export type Run = z.infer<typeof RunSchema>;
export type Attempt = z.infer<typeof AttemptSchema>;
