import { QstashInputError } from "../../qstash/errors";
import { cronError, isTimeZone } from "../../schedule/cron";

/** Upstash-Cron: a cron expression, optionally after `CRON_TZ=<IANA zone> ` as QStash takes it. */
export function parseCron(text: string): { cron: string; timezone?: string } {
  const m = /^\s*CRON_TZ=(\S+)\s+(.*)$/.exec(text);
  const cron = (m ? m[2]! : text).trim();
  const timezone = m?.[1];
  if (timezone !== undefined && !isTimeZone(timezone))
    throw new QstashInputError("Upstash-Cron", `unknown time zone in CRON_TZ: ${timezone}`);
  const error = cronError(cron, timezone ?? "UTC");
  if (error) throw new QstashInputError("Upstash-Cron", error);
  return { cron, ...(timezone !== undefined && { timezone }) };
}

/** The cron as QStash shows it back. */
export const cronText = (schedule: { cron?: string; timezone?: string }) =>
  schedule.timezone ? `CRON_TZ=${schedule.timezone} ${schedule.cron}` : (schedule.cron ?? "");
