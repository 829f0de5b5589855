import cronstrue from "cronstrue";
import { parseDuration } from "./duration";
import type { Schedule } from "./next-fire";

/**
 * A schedule in plain words, for people reading a job or a preview: "At 02:30 AM (Europe/Berlin)",
 * "Every 15 minutes, from 2026-01-01T00:00:00.000Z until 2026-02-01T00:00:00.000Z, at most 10 times".
 * Pure: the words depend on the schedule alone, never on the clock.
 *
 * `delay` is accepted as well as the `at` it becomes when a job is stored, so that a preview can
 * describe what the caller wrote.
 */
export function describeSchedule(schedule: Schedule & { delay?: string }): string {
  const bounds = boundsInWords(schedule);
  return bounds ? `${kindInWords(schedule)}, ${bounds}` : kindInWords(schedule);
}

function kindInWords(s: Schedule & { delay?: string }): string {
  if (s.cron !== undefined) return `${cronInWords(s.cron)} (${s.timezone ?? "UTC"})`;
  if (s.every !== undefined) return `Every ${durationInWords(s.every, true)}`;
  if (s.at !== undefined) return `Once, at ${instant(s.at)}`;
  if (s.delay !== undefined) return `Once, ${durationInWords(s.delay, false)} after creation`;
  // Validation lets no such schedule through; words are still better than a throw on a read path.
  return "No schedule";
}

/**
 * cronstrue's wording. The API's 6-field form has seconds first, but cronstrue takes some
 * 6-field expressions for minutes-first with a year last; with a wildcard year appended (7 fields)
 * it reads seconds first every time. cron-parser accepts a few things cronstrue does not (`H`,
 * hashed fields): those are shown as written rather than failing the job's read.
 */
function cronInWords(expression: string): string {
  const fields = expression.trim().split(/\s+/);
  const text = fields.length === 6 ? [...fields, "*"].join(" ") : fields.join(" ");
  try {
    return cronstrue.toString(text, { throwExceptionOnParseError: true });
  } catch {
    return `On the cron schedule "${expression.trim()}"`;
  }
}

const UNITS = [
  { ms: 86_400_000, name: "day" },
  { ms: 3_600_000, name: "hour" },
  { ms: 60_000, name: "minute" },
  { ms: 1_000, name: "second" },
] as const;

/**
 * "15 minutes", "2 hours", "90 seconds": the largest unit the duration is a whole number of, so
 * "60m" reads "1 hour". `bare` drops a lone 1 ("Every hour", not "Every 1 hour").
 */
function durationInWords(text: string, bare: boolean): string {
  const ms = parseDuration(text);
  if (ms === null) return text;
  const unit = UNITS.find((u) => ms % u.ms === 0) ?? UNITS[3];
  const n = ms / unit.ms;
  if (n === 1) return bare ? unit.name : `1 ${unit.name}`;
  return `${n} ${unit.name}s`;
}

function boundsInWords(s: Schedule): string {
  const window = [s.startAt !== undefined && `from ${instant(s.startAt)}`, s.endAt !== undefined && `until ${instant(s.endAt)}`]
    .filter(Boolean)
    .join(" ");
  const count = s.maxRuns === undefined ? "" : s.maxRuns === 1 ? "at most once" : `at most ${s.maxRuns} times`;
  return [window, count].filter(Boolean).join(", ");
}

/** Instants in one form (UTC, milliseconds), whatever offset the caller wrote them with. */
const instant = (text: string) => {
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? text : new Date(ms).toISOString();
};
