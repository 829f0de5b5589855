/**
 * Instants shown in a job's time zone, with the days its clocks change marked: a schedule's
 * preview must show that "02:30 every day" skips or moves on the night the clocks go forward.
 * Intl does the zone arithmetic (the browser's own tz database), so nothing here knows a rule.
 */

/** The zone's offset from UTC at an instant, in minutes (e.g. 60 for Europe/Berlin in winter). */
export function offsetMinutes(instant: Date, timeZone: string): number {
  const name = new Intl.DateTimeFormat("en-US", { timeZone, timeZoneName: "longOffset" })
    .formatToParts(instant)
    .find((part) => part.type === "timeZoneName")?.value;
  // "GMT" alone is UTC itself; otherwise "GMT+05:30" or "GMT-03:00".
  const match = /GMT([+-])(\d{2}):?(\d{2})?/.exec(name ?? "");
  if (!match) return 0;
  const minutes = Number(match[2]) * 60 + Number(match[3] ?? 0);
  return match[1] === "-" ? -minutes : minutes;
}

export function formatOffset(minutes: number): string {
  const sign = minutes < 0 ? "−" : "+";
  const abs = Math.abs(minutes);
  const hh = String(Math.floor(abs / 60));
  const mm = abs % 60 === 0 ? "" : `:${String(abs % 60).padStart(2, "0")}`;
  return `UTC${sign}${hh}${mm}`;
}

export interface ZonedInstant {
  iso: string;
  /** The wall-clock time in the zone, e.g. "Sun 29 Mar 2026, 03:30:00". */
  local: string;
  offset: string;
  /** Set on the first instant after the zone's offset changed: what changed. */
  clockChange: string | null;
}

/**
 * Each instant in `timeZone`; `since` (e.g. now) is where the offset is first compared, so a
 * change between it and the first instant is marked too.
 */
export function zoned(instants: string[], timeZone: string, since?: Date): ZonedInstant[] {
  const format = new Intl.DateTimeFormat("en-GB", {
    timeZone,
    weekday: "short",
    day: "numeric",
    month: "short",
    year: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    hourCycle: "h23",
  });
  let previous = since ? offsetMinutes(since, timeZone) : null;
  return instants.map((iso) => {
    const at = new Date(iso);
    const offset = offsetMinutes(at, timeZone);
    const clockChange =
      previous !== null && previous !== offset
        ? `clocks go ${offset > previous ? "forward" : "back"}: ${formatOffset(previous)} → ${formatOffset(offset)}`
        : null;
    previous = offset;
    return { iso, local: format.format(at), offset: formatOffset(offset), clockChange };
  });
}
