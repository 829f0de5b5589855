import { z } from "@hono/zod-openapi";
import { STEP_CONDITIONS } from "../workflow/graph";
import { graphIssues, MAX_STEPS } from "../workflow/validate";
import { STEP_ID } from "./ids";
import { RetrySchema } from "./retry";
import { type StoredTarget, TargetSchema, TargetViewSchema } from "./target";

/** A workflow job's steps, as requests give them and responses show them (docs/workflows.md). */

/** One step of a workflow job: an HTTP call run once its parents ended and its `when` holds (docs/workflows.md). */
export const StepSchema = z
  .strictObject({
    id: z.string().regex(STEP_ID, "must be 1 to 64 letters, digits, _ or -").openapi({ example: "extract" }),
    target: TargetSchema.openapi({
      description:
        "Without a body the step is sent JSON { runId, scheduledAt, upstream: { <parent step id>: <its result> } }; with one, that body.",
    }),
    after: z
      .array(z.string().max(64))
      .max(MAX_STEPS)
      .optional()
      .openapi({ description: "The steps this one runs after (its parents); none: it starts when the run starts." }),
    when: z.enum(STEP_CONDITIONS).optional().openapi({
      description:
        "all_succeeded (default): every parent succeeded; all_done: every parent ended, whatever the outcome; any_failed: a parent failed (or was skipped because something above it failed).",
    }),
    retry: RetrySchema.optional().openapi({ description: "This step's attempts; default: the job's retry." }),
    timeoutMs: z.int().min(1_000).max(900_000).optional().openapi({ description: "This step's timeout; default: the job's timeoutMs." }),
  })
  .openapi("Step");
export type Step = z.infer<typeof StepSchema>;

/** The steps of a workflow job: 1 to 50, ids unique, every `after` another step's id, no cycle. */
export const StepsSchema = z
  .array(StepSchema)
  .max(1_000) // bounds the work of reading a request; graphIssues names the limit of 50
  .superRefine((steps, ctx) => {
    for (const issue of graphIssues(steps)) {
      // graphIssues' paths start at "steps"; zod's are relative to this array.
      const path = issue.path
        .split(".")
        .slice(1)
        .map((part) => (/^\d+$/.test(part) ? Number(part) : part));
      ctx.addIssue({ code: "custom", message: issue.message, path });
    }
  })
  .openapi({ description: "A workflow: the run is a graph of HTTP steps instead of one target (give `steps` or `target`, not both)." });

/** A job is one target or one workflow: exactly one of `target` and `steps`. */
export function oneTargetOrSteps(job: { target?: unknown; steps?: unknown }, ctx: z.RefinementCtx): void {
  if ((job.target === undefined) === (job.steps === undefined)) {
    ctx.addIssue({
      code: "custom",
      message: "give exactly one of target or steps",
      path: job.target === undefined ? ["target"] : ["steps"],
    });
  }
}

/** A workflow step as responses show it: its target like a job's (header names, never values). */
export const StepViewSchema = z
  .object({
    id: z.string(),
    target: TargetViewSchema,
    after: z.array(z.string()).optional(),
    when: z.enum(STEP_CONDITIONS).optional(),
    retry: RetrySchema.optional(),
    timeoutMs: z.int().optional(),
  })
  .openapi("StepView");
export type StepView = z.infer<typeof StepViewSchema>;

/** A step as stored: its target sealed like a job's (bound to the job id). */
export type StoredStep = Omit<Step, "target"> & { target: StoredTarget };
