import { z } from "@hono/zod-openapi";
import { parseDuration } from "../schedule/duration";

/**
 * A flow-control group: jobs of one tenant that name the same `key` share its limits over all
 * their shards, counted by the tenant's gate (src/gate/group-permits.ts). The QStash surface
 * maps a queue's parallelism (`queue:<name>`) and Upstash-Flow-Control-* onto it.
 */
export const MAX_GROUP_PARALLELISM = 1_000;
export const MAX_GROUP_RATE = 1_000_000;
const MIN_PERIOD_MS = 1_000;
const MAX_PERIOD_MS = 7 * 86_400_000;

export const FlowControlSchema = z
  .strictObject({
    key: z
      .string()
      .min(1)
      .max(200)
      .openapi({ description: "The group's name, shared by the tenant's jobs that name it.", example: "billing-api" }),
    parallelism: z.int().min(1).max(MAX_GROUP_PARALLELISM).optional().openapi({
      description: "At most this many runs of the group dispatched or running at once, over all shards; the others wait, oldest first.",
    }),
    rate: z
      .int()
      .min(1)
      .max(MAX_GROUP_RATE)
      .optional()
      .openapi({ description: "At most this many runs of the group start in each `period`." }),
    period: z
      .string()
      .max(20)
      .superRefine((text, ctx) => {
        const ms = parseDuration(text);
        if (ms === null) ctx.addIssue({ code: "custom", message: 'must be a whole number and a unit s, m, h or d, e.g. "1m"' });
        else if (ms < MIN_PERIOD_MS || ms > MAX_PERIOD_MS) ctx.addIssue({ code: "custom", message: "period must be between 1s and 7d" });
      })
      .optional()
      .openapi({
        description: "The window `rate` counts in (default 1s); windows start at multiples of it since the Unix epoch.",
        example: "1m",
      }),
  })
  .superRefine((fc, ctx) => {
    if (fc.parallelism === undefined && fc.rate === undefined)
      ctx.addIssue({ code: "custom", message: "give parallelism or rate", path: [] });
    if (fc.period !== undefined && fc.rate === undefined)
      ctx.addIssue({ code: "custom", message: "period applies only with rate", path: ["period"] });
  })
  .openapi("FlowControl", {
    description:
      "A group shared by the tenant's jobs that name its `key`, across all shards: at most `parallelism` of its runs in flight, at most `rate` started per `period`. Each run is held to the limits of its own job (jobs of one group should state the same); a QStash queue's parallelism, when set, is its group's for every message already enqueued.",
  });

export type FlowControl = z.infer<typeof FlowControlSchema>;

/** What the gate counts a group's run against. */
export interface GroupLimits {
  parallelism?: number;
  rate?: number;
  periodMs?: number;
}

export function groupLimits(fc: FlowControl): GroupLimits {
  return {
    ...(fc.parallelism !== undefined && { parallelism: fc.parallelism }),
    ...(fc.rate !== undefined && { rate: fc.rate, periodMs: fc.period === undefined ? 1_000 : parseDuration(fc.period)! }),
  };
}
