import { z } from "@hono/zod-openapi";
import { cronError, isTimeZone } from "../schedule/cron";
import { parseDuration } from "../schedule/duration";
import { MISFIRE_POLICIES } from "../schedule/misfire";
import type { Schedule } from "../schedule/next-fire";
import type { Sealed } from "../security/sealing";
import { Text } from "./common";
import { FlowControlSchema } from "./flow-control";
import { JOB_ID } from "./ids";
import { DEFAULT_RETRY, RetrySchema } from "./retry";
import { oneTargetOrSteps, StepsSchema, StepViewSchema, type StoredStep } from "./step";
import { HttpUrl, Reduced, type StoredTarget, TargetSchema, TargetViewSchema } from "./target";

export { BackoffSchema, DEFAULT_RETRY, RetrySchema } from "./retry";
export { type Step, StepSchema, type StepView, StepViewSchema, type StoredStep } from "./step";
export {
  HTTP_METHODS,
  jsonDepth,
  originOf,
  RESERVED_HEADERS,
  type StoredTarget,
  TARGET_LIMITS,
  type Target,
  TargetSchema,
  type TargetSecrets,
  type TargetView,
  TargetViewSchema,
} from "./target";

/** The zod schemas are the single source of request/response types and of the OpenAPI document. */

/**
 * Instants a schedule may name. The upper bound keeps every fire, and every alarm set for one,
 * far inside what Durable Object alarms accept (dates before 2189) and JS dates represent.
 */
const LAST_INSTANT = Date.parse("2100-01-01T00:00:00Z");

export const Instant = z.iso
  .datetime({ offset: true, error: "must be an ISO-8601 instant with a zone, e.g. 2026-12-01T09:00:00Z" })
  .refine((t) => Date.parse(t) >= 0 && Date.parse(t) < LAST_INSTANT, "must be between 1970 and 2099")
  .openapi({ example: "2026-12-01T09:00:00Z" });

const MIN_EVERY_MS = 1_000;
/** Ten years: an interval's fires stay within what alarms and dates can hold (see LAST_INSTANT). */
const MAX_EVERY_MS = 3_650 * 86_400_000;

const Duration = (what: string, minMs: number, maxMs: number, example: string) =>
  z
    .string()
    .max(20)
    .superRefine((text, ctx) => {
      const ms = parseDuration(text);
      if (ms === null) ctx.addIssue({ code: "custom", message: `must be a whole number and a unit s, m, h or d, e.g. "${example}"` });
      else if (ms < minMs || ms > maxMs)
        ctx.addIssue({ code: "custom", message: `${what} must be between ${fmt(minMs)} and ${fmt(maxMs)}` });
    })
    .openapi({ example });
const fmt = (ms: number) =>
  ms % 86_400_000 === 0
    ? `${ms / 86_400_000}d`
    : ms % 3_600_000 === 0
      ? `${ms / 3_600_000}h`
      : ms % 60_000 === 0
        ? `${ms / 60_000}m`
        : `${ms / 1000}s`;

const YEAR_MS = 365 * 86_400_000;

const ScheduleSchema = z
  .strictObject({
    cron: z.string().max(200).optional().openapi({ example: "*/5 * * * *" }),
    timezone: z.string().max(64).optional().openapi({ example: "Europe/Berlin" }),
    at: Instant.optional(),
    delay: Duration("delay", 0, YEAR_MS, "10m").optional().openapi({ description: "One-off, this long after creation (stored as `at`)." }),
    every: z.string().max(20).optional().openapi({ example: "30s" }),
    startAt: Instant.optional().openapi({ description: "cron/every: no fire before; an interval is anchored here." }),
    endAt: Instant.optional().openapi({ description: "cron/every: no fire after; the job then completes." }),
    maxRuns: z.int().min(1).max(1_000_000).optional().openapi({ description: "cron/every: the job completes after this many fires." }),
  })
  .superRefine((s, ctx) => {
    const kinds = (["cron", "at", "delay", "every"] as const).filter((k) => s[k] !== undefined);
    if (kinds.length !== 1) {
      ctx.addIssue({ code: "custom", message: "give exactly one of cron, at, delay or every", path: [] });
      return;
    }
    for (const bound of ["startAt", "endAt", "maxRuns"] as const) {
      if (s[bound] !== undefined && s.cron === undefined && s.every === undefined) {
        ctx.addIssue({ code: "custom", message: `${bound} applies only to cron and every schedules`, path: [bound] });
      }
    }
    if (s.startAt !== undefined && s.endAt !== undefined && Date.parse(s.endAt) <= Date.parse(s.startAt)) {
      ctx.addIssue({ code: "custom", message: "endAt must be after startAt", path: ["endAt"] });
    }
    if (s.timezone !== undefined && s.cron === undefined) {
      ctx.addIssue({ code: "custom", message: "timezone applies only to cron schedules", path: ["timezone"] });
    }
    if (s.timezone !== undefined && !isTimeZone(s.timezone)) {
      ctx.addIssue({ code: "custom", message: `unknown IANA time zone: ${s.timezone}`, path: ["timezone"] });
    }
    if (s.cron !== undefined) {
      const error = cronError(s.cron, s.timezone !== undefined && isTimeZone(s.timezone) ? s.timezone : "UTC");
      if (error) ctx.addIssue({ code: "custom", message: error, path: ["cron"] });
    }
    if (s.every !== undefined) {
      const ms = parseDuration(s.every);
      if (ms === null) {
        ctx.addIssue({ code: "custom", message: 'must be a whole number and a unit s, m, h or d, e.g. "30s"', path: ["every"] });
      } else if (ms < MIN_EVERY_MS || ms > MAX_EVERY_MS) {
        ctx.addIssue({ code: "custom", message: "must be between 1s and 3650d", path: ["every"] });
      }
    }
  })
  .openapi("Schedule", {
    description:
      'Exactly one of `{ "cron", "timezone"? }`, `{ "every" }`, `{ "at" }` or `{ "delay" }`; cron and every take optional `startAt`, `endAt`, `maxRuns`.',
  });

/** What a job's notifications are about (docs/jobs-and-schedules.md, "Notifications"). */
const NOTIFY_EVENTS = ["failed", "dead", "paused", "recovered"] as const;
export type NotifyEvent = (typeof NOTIFY_EVENTS)[number];

export const NotifySchema = z
  .strictObject({
    url: HttpUrl.openapi({ example: "https://example.com/hooks/edgecron" }),
    on: z
      .array(z.enum(NOTIFY_EVENTS))
      .min(1)
      .max(NOTIFY_EVENTS.length)
      .refine((events) => new Set(events).size === events.length, "each event at most once")
      .default(["failed", "dead", "paused", "recovered"])
      .openapi({
        description:
          "failed: a run ended failed (the target refused it); dead: a run used up its attempts; paused: edgecron paused the job (pauseAfterFailures); recovered: a run succeeded after runs that ended failed or dead.",
      }),
  })
  .openapi("Notify", {
    description:
      "A signed JSON POST (signed as job requests are, Edgecron-Signature-V2 with the tenant's secrets) to `url` on each event in `on`, delivered at least once with its own retries; it never holds up the job's runs.",
  });

export type Notify = z.infer<typeof NotifySchema>;

/**
 * A notification's receiver as stored: its events and origin in the clear, its URL sealed, as a
 * target's is (src/security/notify-urls.ts). One stored before URLs were sealed is a `Notify`,
 * its URL in clear, until the sweep seals it (src/reconcile/resealing.ts).
 */
export interface SealedNotify {
  on: NotifyEvent[];
  origin: string;
  secrets: Sealed;
}
export type StoredNotify = SealedNotify | Notify;

export const OVERLAP_POLICIES = ["allow", "forbid", "buffer_one", "replace"] as const;

/** Everything about a job but its name: what PATCH may change, and what the shard runs. */
/** How long a job's finished runs stay in its shard before they go to the archive (R2). */
const RetentionSchema = z
  .strictObject({
    days: z.int().min(1).max(3_650).optional().openapi({ description: "Finished runs older than this leave the shard (default 7)." }),
    maxRuns: z
      .int()
      .min(1)
      .max(100_000)
      .optional()
      .openapi({ description: "Beyond this many of the job's newest runs, older finished ones leave the shard (default 1,000)." }),
  })
  .openapi("Retention");

/** At most this many jobs chained to one outcome of a job. */
const MAX_CHAINED_JOBS = 10;
/**
 * How far a chain goes: a save looks this many levels down for a loop, and a run this many hops
 * from the run that began its chain triggers nothing more, which ends a loop the save could not
 * see (two saves racing, or a loop longer than this).
 */
export const MAX_CHAIN_DEPTH = 20;

/** Jobs of the same tenant to trigger when a run of this job ends `outcome` (src/shard/notifier.ts). */
function Chain(outcome: string) {
  return z
    .array(z.string().regex(JOB_ID, "not a job id (job_ and 19 letters or digits)"))
    .min(1)
    .max(MAX_CHAINED_JOBS)
    .refine((ids) => new Set(ids).size === ids.length, "names a job more than once")
    .optional()
    .openapi({
      description: `Jobs of the same tenant to trigger once each when a run of this job ends ${outcome}: a run of each, with trigger "chain" and chainedFrom naming this run, whatever the shard, however often the end is reported.`,
      example: ["job_0mihx2k3f8a1b2c3d4e"],
    });
}

const JobFields = {
  schedule: ScheduleSchema,
  target: TargetSchema.optional(),
  steps: StepsSchema.optional(),
  retry: RetrySchema.default(DEFAULT_RETRY),
  timeoutMs: z.int().min(1_000).max(900_000).default(30_000),
  overlap: z.enum(OVERLAP_POLICIES).default("allow").openapi({
    description:
      "When a fire comes while the previous run is unfinished: allow (run both), forbid (record the fire as skipped), buffer_one (keep at most one waiting, started when the previous run ends), replace (cancel the unfinished run).",
  }),
  misfire: z.enum(MISFIRE_POLICIES).default("fire_once").openapi({
    description:
      "Fires missed while the job was paused or its shard could not run: skip them, fire_once (one catch-up run now), or catch_up (each one within catchupWindow, at most 100).",
  }),
  catchupWindow: Duration("catchupWindow", 1_000, 7 * 86_400_000, "1h").default("1h"),
  jitter: Duration("jitter", 0, 3_600_000, "30s")
    .optional()
    .openapi({ description: "Spread each fire over this window, deterministically per (job, instant)." }),
  maxConcurrency: z
    .int()
    .min(1)
    .max(1_000)
    .optional()
    .openapi({ description: "At most this many of the job's runs dispatched or running at once; the rest wait." }),
  ratePerSecond: z
    .number()
    .min(0.001)
    .max(1_000)
    .optional()
    .openapi({ description: "Runs start toward the target at most this often (evenly spaced), so a burst does not hammer it." }),
  flowControl: FlowControlSchema.optional(),
  retention: RetentionSchema.optional().openapi({
    description: "Overrides how long finished runs are kept in the shard; older ones are archived and read back through /history.",
  }),
  notify: NotifySchema.optional(),
  breaker: z.boolean().optional().openapi({
    description:
      "false: this job's runs ignore the circuit breaker of their target's origin (they are neither held by it nor counted in it). Default: on.",
  }),
  pauseAfterFailures: z.int().min(1).max(1_000).optional().openapi({
    description:
      "Pause the job after this many runs in a row ended dead or failed (cancelled and skipped runs do not count, a success starts the count again); `pausedReason` says why, and resume clears it.",
  }),
  onSuccess: Chain("succeeded"),
  onFailure: Chain("failed or dead"),
};

export const CreateJobSchema = z
  .strictObject({ name: Text(200).min(1).optional(), ...JobFields })
  .superRefine(oneTargetOrSteps)
  .openapi("CreateJob");

export type CreateJob = z.infer<typeof CreateJobSchema>;
/**
 * What the shard needs to run a job: the accepted definition minus presentation, its target (or
 * each step's) sealed. Exactly one of `target` and `steps` is there.
 */
export type JobSpec = Omit<CreateJob, "name" | "target" | "steps" | "notify"> & {
  target?: StoredTarget;
  steps?: StoredStep[];
  notify?: StoredNotify;
  /**
   * The job prefix of the key that set each chain, where it had one (src/app/chains.ts): a
   * chained job is triggered only while its name is under it, so a key limited to a prefix never
   * reaches a job outside it through a chain, even one renamed out of it since. Not shown.
   */
  chainPrefixes?: ChainPrefixes;
};

export type ChainPrefixes = Partial<Record<"onSuccess" | "onFailure", string>>;

/** PATCH: any of the fields, replaced whole; the rest stay as they are. */
export const PatchJobSchema = z
  .strictObject({
    name: Text(200).min(1).nullable().optional(),
    schedule: ScheduleSchema.optional(),
    target: TargetSchema.optional(),
    steps: StepsSchema.optional().openapi({
      description: "A workflow job's steps, replaced whole (a single-target job keeps its target).",
    }),
    retry: RetrySchema.optional(),
    timeoutMs: JobFields.timeoutMs.unwrap().optional(),
    overlap: z.enum(OVERLAP_POLICIES).optional(),
    misfire: z.enum(MISFIRE_POLICIES).optional(),
    catchupWindow: JobFields.catchupWindow.unwrap().optional(),
    jitter: JobFields.jitter.unwrap().nullable().optional(),
    maxConcurrency: JobFields.maxConcurrency.unwrap().nullable().optional(),
    ratePerSecond: JobFields.ratePerSecond.unwrap().nullable().optional(),
    flowControl: FlowControlSchema.nullable().optional(),
    retention: RetentionSchema.nullable().optional(),
    pauseAfterFailures: JobFields.pauseAfterFailures.unwrap().nullable().optional(),
    notify: NotifySchema.nullable().optional(),
    breaker: z.boolean().optional(),
    onSuccess: JobFields.onSuccess.unwrap().nullable().optional(),
    onFailure: JobFields.onFailure.unwrap().nullable().optional(),
  })
  .refine((p) => Object.keys(p).length > 0, "give at least one field to change")
  .openapi("PatchJob");

/** The schedule in plain words (src/schedule/describe.ts): for people, not for parsing. */
const ScheduleDescription = z.string().openapi({
  description: "The schedule and its bounds in plain words, cron times in the schedule's time zone; for display, not for parsing.",
  example: "At 02:30 AM (Europe/Berlin), from 2026-01-01T00:00:00.000Z, at most 10 times",
});

export const JobSchema = z
  .object({
    id: z.string().openapi({ example: "job_0mihx2k3f8a1b2c3d4e5" }),
    tenantId: z.string(),
    name: z.string().nullable(),
    schedule: ScheduleSchema,
    description: ScheduleDescription,
    target: TargetViewSchema.optional().openapi({ description: "A single-target job's target (a workflow job has steps instead)." }),
    steps: z.array(StepViewSchema).optional().openapi({ description: "A workflow job's graph." }),
    retry: RetrySchema,
    timeoutMs: z.int(),
    overlap: z.enum(OVERLAP_POLICIES),
    misfire: z.enum(MISFIRE_POLICIES),
    catchupWindow: z.string(),
    jitter: z.string().optional(),
    maxConcurrency: z.int().optional(),
    ratePerSecond: z.number().optional(),
    flowControl: FlowControlSchema.optional(),
    retention: RetentionSchema.optional(),
    pauseAfterFailures: z.int().optional(),
    notify: z.object({ url: z.string(), on: z.array(z.enum(NOTIFY_EVENTS)), reduced: Reduced }).optional(),
    breaker: z.boolean().optional(),
    onSuccess: z.array(z.string()).optional(),
    onFailure: z.array(z.string()).optional(),
    paused: z.boolean(),
    pausedReason: z.string().nullable().openapi({
      description: "Why edgecron paused the job itself (pauseAfterFailures); null when a person paused it, or it is not paused.",
    }),
    completed: z.boolean().openapi({ description: "No fire is left: a one-off fired, or endAt or maxRuns was reached." }),
    version: z.int().openapi({ description: "Bumped on every change." }),
    shard: z.string(),
    createdAt: Instant,
    updatedAt: Instant,
    nextRunAt: Instant.nullable().openapi({ description: "The next scheduled fire; null when none is left or the job is paused." }),
  })
  .openapi("Job");
export type Job = z.infer<typeof JobSchema>;

export const BackfillSchema = z
  .strictObject({ from: Instant, to: Instant })
  .refine((b) => Date.parse(b.to) >= Date.parse(b.from), { message: "to must not be before from", path: ["to"] })
  .openapi("Backfill");

export const PreviewSchema = z
  .strictObject({
    schedule: ScheduleSchema,
    from: Instant.optional().openapi({ description: "Preview as if the job were created at this instant (default: now)." }),
    count: z.int().min(1).max(100).default(10),
  })
  .openapi("PreviewRequest");

export const PreviewResultSchema = z
  .object({
    description: ScheduleDescription,
    instants: z.array(z.string()).openapi({ description: "The next fires, in order, as UTC instants." }),
  })
  .openapi("Preview");

/**
 * Schedules are stored in one canonical form: `delay` becomes the `at` it means, and instants
 * are UTC ISO strings, so the shard and the sweep never depend on when a request was made.
 */
export function canonicalSchedule(schedule: z.infer<typeof ScheduleSchema>, now: number): Schedule {
  const { delay, ...rest } = schedule;
  const utc = (instant: string | undefined) => (instant === undefined ? undefined : new Date(instant).toISOString());
  const out: Schedule = { ...rest, at: delay !== undefined ? new Date(now + parseDuration(delay)!).toISOString() : utc(rest.at) };
  if (rest.startAt !== undefined) out.startAt = utc(rest.startAt);
  if (rest.endAt !== undefined) out.endAt = utc(rest.endAt);
  return Object.fromEntries(Object.entries(out).filter(([, v]) => v !== undefined)) as Schedule;
}
