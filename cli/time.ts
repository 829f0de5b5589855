/** The zone the CLI's user reads times in: TZ, or the system's. */
export const localZone = (): string => Intl.DateTimeFormat().resolvedOptions().timeZone;

const formats = new Map<string, Intl.DateTimeFormat>();

/** An instant as people read it in a zone: "2026-12-01 10:00:00 GMT+1"; "" for none. */
export function formatInstant(iso: string | null | undefined, timeZone: string): string {
  if (!iso) return "";
  let format = formats.get(timeZone);
  if (!format) {
    format = new Intl.DateTimeFormat("en-US", {
      timeZone,
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
      hourCycle: "h23",
      timeZoneName: "short",
    });
    formats.set(timeZone, format);
  }
  const part = Object.fromEntries(format.formatToParts(new Date(iso)).map((p) => [p.type, p.value]));
  return `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute}:${part.second} ${part.timeZoneName}`;
}
