import { z } from "@hono/zod-openapi";
import { DEFAULT_BACKOFF } from "../schedule/backoff";
import { cronError, isTimeZone } from "../schedule/cron";
import { parseDuration } from "../schedule/duration";
import { MISFIRE_POLICIES } from "../schedule/misfire";
import type { Schedule } from "../schedule/next-fire";
import type { Sealed } from "../security/sealing";
import { Text } from "./common";

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

export const ScheduleSchema = z
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
  "edgecron-signature",
];

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
  if (typeof value !== "string") return "must be a string";
  if (value.length > TARGET_LIMITS.headerValueChars) return `must be at most ${TARGET_LIMITS.headerValueChars} characters`;
  if (/[\r\n\0]/.test(value)) return "a header value may not contain CR, LF or NUL";
  if (/[^\t\x20-\x7e\x80-\xff]/.test(value)) return "a header value must be Latin-1 text without control characters";
  return null;
}

/** Where a job calls or notifies: the SSRF guard (src/security/target-guard.ts) then checks the address. */
const HttpUrl = z.url({ protocol: /^https?$/, error: "must be an absolute http or https URL" }).max(2048);

/** What a job's notifications are about (README, Operations: Notifications). */
export const NOTIFY_EVENTS = ["failed", "dead", "paused", "recovered"] as const;
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
      "A signed JSON POST (the Edgecron-Signature scheme of job requests, with the tenant's secret) to `url` on each event in `on`, delivered at least once with its own retries; it never holds up the job's runs.",
  });

export type Notify = z.infer<typeof NotifySchema>;

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
  })
  .superRefine((t, ctx) => {
    if (t.body !== undefined && t.method === "GET") {
      ctx.addIssue({ code: "custom", message: "a GET request has no body", path: ["body"] });
    }
  })
  .openapi("Target");
export type Target = z.infer<typeof TargetSchema>;

/** The secret part of a target, sealed (AES-GCM) in D1 and in shard storage alike. */
export interface TargetSecrets {
  headers?: Record<string, string>;
  body?: Target["body"];
}

/** A target as stored: what routing and display need in the clear, the rest sealed. */
export interface StoredTarget {
  url: string;
  method: Target["method"];
  headerNames: string[];
  secrets: Sealed | null;
}

/** A target as responses show it: header names, never their values. */
export const TargetViewSchema = z
  .object({
    url: z.string(),
    method: z.enum(HTTP_METHODS),
    headerNames: z.array(z.string()),
    body: TargetSchema.shape.body,
  })
  .openapi("TargetView");
export type TargetView = z.infer<typeof TargetViewSchema>;

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

export const OVERLAP_POLICIES = ["allow", "forbid", "buffer_one", "replace"] as const;

/** Everything about a job but its name: what PATCH may change, and what the shard runs. */
/** How long a job's finished runs stay in its shard before they go to the archive (R2). */
export const RetentionSchema = z
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

const JobFields = {
  schedule: ScheduleSchema,
  target: TargetSchema,
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
};

export const CreateJobSchema = z.strictObject({ name: Text(200).min(1).optional(), ...JobFields }).openapi("CreateJob");

export type CreateJob = z.infer<typeof CreateJobSchema>;
/** What the shard needs to run a job: the accepted definition minus presentation, its target sealed. */
export type JobSpec = Omit<CreateJob, "name" | "target"> & { target: StoredTarget };

/** PATCH: any of the fields, replaced whole; the rest stay as they are. */
export const PatchJobSchema = z
  .strictObject({
    name: Text(200).min(1).nullable().optional(),
    schedule: ScheduleSchema.optional(),
    target: TargetSchema.optional(),
    retry: RetrySchema.optional(),
    timeoutMs: JobFields.timeoutMs.unwrap().optional(),
    overlap: z.enum(OVERLAP_POLICIES).optional(),
    misfire: z.enum(MISFIRE_POLICIES).optional(),
    catchupWindow: JobFields.catchupWindow.unwrap().optional(),
    jitter: JobFields.jitter.unwrap().nullable().optional(),
    maxConcurrency: JobFields.maxConcurrency.unwrap().nullable().optional(),
    ratePerSecond: JobFields.ratePerSecond.unwrap().nullable().optional(),
    retention: RetentionSchema.nullable().optional(),
    pauseAfterFailures: JobFields.pauseAfterFailures.unwrap().nullable().optional(),
    notify: NotifySchema.nullable().optional(),
    breaker: z.boolean().optional(),
  })
  .refine((p) => Object.keys(p).length > 0, "give at least one field to change")
  .openapi("PatchJob");

/** The schedule in plain words (src/schedule/describe.ts): for people, not for parsing. */
export const ScheduleDescription = z.string().openapi({
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
    target: TargetViewSchema,
    retry: RetrySchema,
    timeoutMs: z.int(),
    overlap: z.enum(OVERLAP_POLICIES),
    misfire: z.enum(MISFIRE_POLICIES),
    catchupWindow: z.string(),
    jitter: z.string().optional(),
    maxConcurrency: z.int().optional(),
    ratePerSecond: z.number().optional(),
    retention: RetentionSchema.optional(),
    pauseAfterFailures: z.int().optional(),
    notify: z.object({ url: z.string(), on: z.array(z.enum(NOTIFY_EVENTS)) }).optional(),
    breaker: z.boolean().optional(),
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
