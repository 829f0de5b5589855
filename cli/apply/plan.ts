import type { CreateJob, Job, PatchJob, Schedule } from "edgecron/client";
import { parseDuration } from "../../src/schedule/duration.ts";
import { type ChainChange, planChains, withoutChains } from "./chains.ts";
import { SERVER_DEFAULTS } from "./defaults.ts";
import { JOB_FIELDS } from "./fields.ts";
import type { DeclaredJob } from "./file.ts";

/**
 * What `edgecron apply` does to make a tenant's jobs match a file, worked out without a call:
 * jobs are matched by name; a declared job with no match is created, one that differs is
 * patched (the fields that differ, each replaced whole), and, with `prune`, a job the file does
 * not name is deleted. Fields are compared by meaning, as the API stores them: a field left out
 * is its default, durations and instants are compared as times ("60m" is "1h"), header names
 * without case. Header values are write-only (the API shows names only), so a changed value
 * under the same names is not seen: change a name, or patch the job by hand.
 */

export interface FieldChange {
  field: string;
  from: unknown;
  to: unknown;
}

export type Change =
  | { action: "create"; name: string; job: CreateJob; pause: boolean }
  | ChainChange
  | { action: "update"; name: string; id: string; patch: PatchJob | null; pause: boolean | null; fields: FieldChange[] }
  | { action: "delete"; name: string | null; id: string };

export interface Plan {
  /** Deletes first (they free room under a tenant's job quota), then updates, then creates, then chains (by then every job exists). */
  changes: Change[];
  unchanged: Array<{ name: string; id: string }>;
}

/** Two of the tenant's jobs carry a name the file declares: apply cannot tell which one it means. */
export class AmbiguousName extends Error {}

type Field = (typeof JOB_FIELDS)[number];
/** Fields PATCH clears with null; the others go back to their default by being sent it. */
const CLEARABLE = new Set<Field>(["jitter", "maxConcurrency", "ratePerSecond", "flowControl", "retention", "pauseAfterFailures", "notify"]);

export function planApply(declared: DeclaredJob[], current: Job[], options: { prune: boolean }): Plan {
  const byName = new Map<string, Job[]>();
  for (const job of current) if (job.name !== null) byName.set(job.name, [...(byName.get(job.name) ?? []), job]);
  const declaredNames = new Set(declared.map((d) => d.name));

  const deletes: Change[] = options.prune
    ? current
        .filter((job) => job.name === null || !declaredNames.has(job.name))
        .map((job) => ({ action: "delete", name: job.name, id: job.id }))
    : [];
  const updates: Change[] = [];
  const creates: Change[] = [];
  const unchanged: Plan["unchanged"] = [];

  for (const want of declared) {
    const matches = byName.get(want.name) ?? [];
    if (matches.length > 1) {
      throw new AmbiguousName(
        `${matches.length} jobs are named "${want.name}" (${matches.map((j) => j.id).join(", ")}): delete or rename all but one`,
      );
    }
    const { paused, ...job } = withoutChains(want);
    const have = matches[0];
    if (!have) {
      creates.push({ action: "create", name: want.name, job, pause: paused === true });
      continue;
    }
    const fields: FieldChange[] = [];
    const patch: Record<string, unknown> = {};
    const wanted = comparable(job);
    const existing = comparable(have);
    for (const field of JOB_FIELDS) {
      if (same(wanted[field], existing[field])) continue;
      fields.push({ field, from: shown(have, field), to: shown(job, field) });
      patch[field] =
        field === "breaker"
          ? job.breaker !== false // the API has no null for it: on is sent as true
          : (job[field] ?? (CLEARABLE.has(field) ? null : SERVER_DEFAULTS[field as keyof typeof SERVER_DEFAULTS]));
    }
    const pause = paused === undefined || paused === have.paused ? null : paused;
    if (pause !== null) fields.push({ field: "paused", from: have.paused, to: pause });
    if (fields.length === 0) unchanged.push({ name: want.name, id: have.id });
    else
      updates.push({
        action: "update",
        name: want.name,
        id: have.id,
        patch: Object.keys(patch).length > 0 ? (patch as PatchJob) : null,
        pause,
        fields,
      });
  }
  const chains = planChains(declared, current, options);
  const chained = new Set(chains.map((c) => c.name));
  return { changes: [...deletes, ...updates, ...creates, ...chains], unchanged: unchanged.filter((u) => !chained.has(u.name)) };
}

/** A job's fields in one form for both sides: the file's job and the API's. */
type Comparable = Record<Field, unknown>;

/** A target as the file declares it (headers with values) or as the API shows it (header names only). */
type TargetSide = {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  headerNames?: string[];
  body?: unknown;
  bodyBase64?: string;
};

type Sides = Pick<CreateJob, Exclude<Field, "target" | "steps">> & {
  /** Absent for a workflow job, which has `steps`. */
  target?: TargetSide;
  steps?: Array<{ id: string; target: TargetSide; after?: string[]; when?: string; retry?: CreateJob["retry"]; timeoutMs?: number }>;
};

function comparable(job: Sides): Comparable {
  return {
    ...comparableFields(job),
    target: job.target ? comparableTarget(job.target) : null,
    // In their order (the API keeps it), each as the API stores it: a step without `when` waits
    // for all its parents to succeed, one without `retry` or `timeoutMs` takes the job's.
    steps:
      job.steps?.map((step) => ({
        id: step.id,
        target: comparableTarget(step.target),
        after: [...(step.after ?? [])].sort(),
        when: step.when ?? "all_succeeded",
        retry: step.retry ? comparableRetry(step.retry) : null,
        timeoutMs: step.timeoutMs ?? null,
      })) ?? null,
  };
}

function comparableTarget(target: TargetSide) {
  const names = target.headerNames ?? Object.keys(target.headers ?? {});
  return {
    url: target.url,
    method: target.method ?? SERVER_DEFAULTS.method,
    headerNames: names.map((n) => n.toLowerCase()).sort(),
    body: target.body ?? null,
    bodyBase64: target.bodyBase64 ?? null,
  };
}

/** A retry policy with the API's defaults filled in. */
function comparableRetry(retry: NonNullable<CreateJob["retry"]>) {
  const backoff = retry.backoff ?? SERVER_DEFAULTS.retry.backoff;
  return {
    maxAttempts: retry.maxAttempts ?? SERVER_DEFAULTS.retry.maxAttempts,
    backoff: {
      initialMs: backoff.initialMs ?? SERVER_DEFAULTS.retry.backoff.initialMs,
      maxMs: backoff.maxMs ?? SERVER_DEFAULTS.retry.backoff.maxMs,
      factor: backoff.factor ?? SERVER_DEFAULTS.retry.backoff.factor,
    },
    jitter: retry.jitter ?? SERVER_DEFAULTS.retry.jitter,
    retryOn: retry.retryOn ?? null,
  };
}

function comparableFields(job: Sides): Omit<Comparable, "target" | "steps"> {
  return {
    schedule: scheduleOf(job.schedule),
    retry: comparableRetry(job.retry ?? SERVER_DEFAULTS.retry),
    timeoutMs: job.timeoutMs ?? SERVER_DEFAULTS.timeoutMs,
    overlap: job.overlap ?? SERVER_DEFAULTS.overlap,
    misfire: job.misfire ?? SERVER_DEFAULTS.misfire,
    catchupWindow: duration(job.catchupWindow ?? SERVER_DEFAULTS.catchupWindow),
    jitter: job.jitter === undefined ? null : duration(job.jitter),
    maxConcurrency: job.maxConcurrency ?? null,
    ratePerSecond: job.ratePerSecond ?? null,
    // A period is its duration, whatever unit wrote it; absent with a rate is the API's 1s.
    flowControl: job.flowControl
      ? { ...job.flowControl, ...(job.flowControl.rate !== undefined && { period: duration(job.flowControl.period ?? "1s") }) }
      : null,
    retention: job.retention ?? null,
    pauseAfterFailures: job.pauseAfterFailures ?? null,
    // The API fills in the default events; the file may leave them out.
    notify: job.notify ? { url: job.notify.url, on: [...(job.notify.on ?? NOTIFY_DEFAULT_EVENTS)].sort() } : null,
    // On unless a job says false: absent and true mean the same.
    breaker: job.breaker !== false,
  };
}

const NOTIFY_DEFAULT_EVENTS = ["failed", "dead", "paused", "recovered"];

/** A schedule as the API stores it: instants in UTC, a cron's zone UTC unless named. */
function scheduleOf(s: Schedule): Schedule {
  const out: Record<string, unknown> = {
    cron: s.cron?.trim().split(/\s+/).join(" "),
    timezone: s.cron === undefined ? s.timezone : (s.timezone ?? "UTC"),
    every: s.every === undefined ? undefined : duration(s.every),
    at: instant(s.at),
    delay: s.delay,
    startAt: instant(s.startAt),
    endAt: instant(s.endAt),
    maxRuns: s.maxRuns,
  };
  return Object.fromEntries(Object.entries(out).filter(([, v]) => v !== undefined)) as Schedule;
}

/** Milliseconds, or the text itself when it is no duration (the API will say so). */
const duration = (text: string) => parseDuration(text) ?? text;
const instant = (text: string | undefined) =>
  text === undefined || Number.isNaN(Date.parse(text)) ? text : new Date(Date.parse(text)).toISOString();

/** A field as the diff prints it: never a header's value, which may be a secret. */
function shown(job: Sides, field: Field): unknown {
  if (field === "target") return job.target ? shownTarget(job.target) : null;
  if (field === "steps") return job.steps?.map((step) => ({ ...step, target: shownTarget(step.target) })) ?? null;
  return job[field] ?? null;
}

function shownTarget(target: TargetSide) {
  const { headers, headerNames, ...rest } = target;
  return { ...rest, headerNames: headerNames ?? Object.keys(headers ?? {}) };
}

/** Equal as JSON with keys in any order. */
function same(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}
