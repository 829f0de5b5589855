/**
 * Durations as users write them: "30s", "5m", "2h", "1d". A regex is all this needs;
 * a library would bring units (months, years) whose length is not fixed.
 */
const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const DURATION = /^([1-9]\d{0,9})(s|m|h|d)$/;

/** Milliseconds of a duration string, or null if it is not one. */
export function parseDuration(text: string): number | null {
  const match = DURATION.exec(text);
  if (!match) return null;
  const ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  return Number.isSafeInteger(ms) ? ms : null;
}
