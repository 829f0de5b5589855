import { readFileSync } from "node:fs";
import type { CreateJob, PatchJob, Schedule } from "edgecron/client";
import { parse as parseYaml } from "yaml";
import { UsageError } from "./exit.ts";

/** The flags that describe a schedule, shared by `jobs create`, `jobs patch` and `preview`. */
export interface ScheduleFlags {
  cron?: string;
  tz?: string;
  every?: string;
  at?: string;
  delay?: string;
  startAt?: string;
  endAt?: string;
  maxRuns?: number;
}

/** The flags of a job's definition beyond its schedule. */
export interface JobFlags extends ScheduleFlags {
  file?: string;
  name?: string;
  /** The target's URL (--url is the API's). */
  target?: string;
  method?: string;
  header?: string[];
  body?: string;
  timeoutMs?: number;
  overlap?: string;
  misfire?: string;
  jitter?: string;
  maxConcurrency?: number;
  rate?: number;
}

/** Drops what is undefined, so that a flag not given sends nothing. */
const defined = <T extends object>(o: T): T => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;

/**
 * The schedule the flags describe, or undefined when they name none. Only the mix of kinds is
 * refused here; what each value may be is the API's to say, with the same words as for curl.
 */
export function scheduleOf(flags: ScheduleFlags): Schedule | undefined {
  const kinds = (["cron", "every", "at", "delay"] as const).filter((k) => flags[k] !== undefined);
  if (kinds.length > 1)
    throw new UsageError(`give one of --cron, --every, --at or --delay, not ${kinds.map((k) => `--${k}`).join(" and ")}`);
  const bounds = defined({ startAt: flags.startAt, endAt: flags.endAt, maxRuns: flags.maxRuns });
  if (kinds.length === 0) {
    if (flags.tz !== undefined || Object.keys(bounds).length > 0)
      throw new UsageError("--tz, --start-at, --end-at and --max-runs need a schedule");
    return undefined;
  }
  return defined({ cron: flags.cron, timezone: flags.tz, every: flags.every, at: flags.at, delay: flags.delay, ...bounds });
}

/** "Name: value" (or "Name=value") of --header. */
function headerOf(text: string): [string, string] {
  const match = /^([^:=\s]+)\s*[:=]\s*(.*)$/.exec(text);
  if (!match) throw new UsageError(`--header takes "Name: value", not ${JSON.stringify(text)}`);
  return [match[1]!, match[2]!];
}

/** --body: a JSON object or array is sent as JSON; anything else as the text it is. */
function bodyOf(text: string): string | unknown[] | Record<string, unknown> {
  if (/^\s*[[{]/.test(text)) {
    try {
      return JSON.parse(text) as unknown[] | Record<string, unknown>;
    } catch (err) {
      throw new UsageError(`--body looks like JSON but is not: ${(err as Error).message}`);
    }
  }
  return text;
}

/** A JSON or YAML file's content (YAML is a superset of JSON). */
export function readDefinitionFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new UsageError(`cannot read ${path}: ${(err as Error).message}`);
  }
  try {
    return parseYaml(text);
  } catch (err) {
    throw new UsageError(`${path} is neither JSON nor YAML: ${(err as Error).message}`);
  }
}

function objectFile(path: string | undefined): Record<string, unknown> {
  if (path === undefined) return {};
  const content = readDefinitionFile(path);
  if (typeof content !== "object" || content === null || Array.isArray(content))
    throw new UsageError(`${path} must hold one job, an object`);
  return content as Record<string, unknown>;
}

/** The fields the flags set (the target only when --target is given: a target is replaced whole). */
function fieldsOf(flags: JobFlags): Record<string, unknown> {
  const targetFlags = flags.method !== undefined || (flags.header?.length ?? 0) > 0 || flags.body !== undefined;
  if (targetFlags && flags.target === undefined)
    throw new UsageError("--method, --header and --body describe a target: give its URL, --target, too");
  const target =
    flags.target === undefined
      ? undefined
      : defined({
          url: flags.target,
          method: flags.method?.toUpperCase(),
          headers: flags.header?.length ? Object.fromEntries(flags.header.map(headerOf)) : undefined,
          body: flags.body === undefined ? undefined : bodyOf(flags.body),
        });
  return defined({
    name: flags.name,
    schedule: scheduleOf(flags),
    target,
    timeoutMs: flags.timeoutMs,
    overlap: flags.overlap,
    misfire: flags.misfire,
    jitter: flags.jitter,
    maxConcurrency: flags.maxConcurrency,
    ratePerSecond: flags.rate,
  });
}

/** POST /v1/jobs's body: the --file's job, each flag given replacing its field. */
export function createBodyOf(flags: JobFlags): CreateJob {
  const job = { ...objectFile(flags.file), ...fieldsOf(flags) };
  const missing = ["schedule", "target"].filter((k) => job[k] === undefined);
  if (missing.length > 0) {
    throw new UsageError(`a job needs a ${missing.join(" and a ")}: --cron, --every, --at or --delay, and --target (or --file)`);
  }
  return job as CreateJob;
}

/** PATCH's body: the fields given in --file and by flags, and no other. */
export function patchBodyOf(flags: JobFlags): PatchJob {
  const patch = { ...objectFile(flags.file), ...fieldsOf(flags) };
  if (Object.keys(patch).length === 0) throw new UsageError("nothing to change: give a field's flag (see --help) or --file");
  return patch as PatchJob;
}
