import { CronExpressionParser } from "cron-parser";

/** cron-parser also accepts 4 or 7 fields; the API promises 5 (minute first) or 6 (second first). */
const FIELD_COUNTS = new Set([5, 6]);

/** Why a cron expression is unusable, or null when it is fine. */
export function cronError(expression: string, timezone = "UTC"): string | null {
  const trimmed = expression.trim();
  if (!trimmed.startsWith("@") && !FIELD_COUNTS.has(trimmed.split(/\s+/).length)) {
    return "a cron expression has 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first)";
  }
  try {
    CronExpressionParser.parse(trimmed, { tz: timezone, currentDate: 0 }).next();
    return null;
  } catch (err) {
    return `invalid cron expression: ${(err as Error).message}`;
  }
}

/** True when the runtime knows this IANA zone. */
export function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

/** The first instant strictly after `afterMs` whose wall-clock time in `timezone` matches. */
export function nextCronFire(expression: string, timezone: string, afterMs: number): number | null {
  const cron = CronExpressionParser.parse(expression.trim(), { tz: timezone, currentDate: new Date(afterMs) });
  if (!cron.hasNext()) return null;
  const next = cron.next().getTime();
  // cron-parser rounds the start up to the next whole second; a fire exactly at afterMs
  // would be returned again, so step past it.
  return next > afterMs ? next : nextCronFire(expression, timezone, afterMs + 1);
}
