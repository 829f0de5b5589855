/** "in 5 min", "3 h ago": how far an instant is from now, for lists read at a glance. */
export function relative(iso: string | null, now = Date.now()): string {
  if (!iso) return "—";
  const ms = Date.parse(iso) - now;
  const abs = Math.abs(ms);
  const [value, unit] =
    abs < 60_000
      ? [Math.round(abs / 1000), "s"]
      : abs < 3_600_000
        ? [Math.round(abs / 60_000), "min"]
        : abs < 86_400_000
          ? [Math.round(abs / 3_600_000), "h"]
          : [Math.round(abs / 86_400_000), "d"];
  return ms >= 0 ? `in ${value} ${unit}` : `${value} ${unit} ago`;
}

/** An instant in the reader's own zone, to the second. */
export function localTime(iso: string | null): string {
  if (!iso) return "—";
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

/** The value of an <input type="datetime-local"> (the reader's zone) as an ISO instant. */
export function fromLocalInput(value: string): string {
  return new Date(value).toISOString();
}
