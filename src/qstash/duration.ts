import { QstashInputError } from "./errors";

/**
 * QStash's durations: a whole number and a unit, or several of them run together as Go writes
 * them ("10s", "1h30m", "500ms", "2d"). A bare number is seconds, as the SDK sends numbers.
 */
const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^(?:\d+(?:ms|s|m|h|d))+$/;
const PART = /(\d+)(ms|s|m|h|d)/g;

/** Milliseconds of a duration, or null if the text is not one. */
export function parseQstashDuration(text: string): number | null {
  const value = text.trim();
  if (/^\d{1,12}$/.test(value)) return Number(value) * 1_000;
  if (!DURATION.test(value)) return null;
  let ms = 0;
  for (const [, amount, unit] of value.matchAll(PART)) ms += Number(amount) * UNIT_MS[unit!]!;
  return Number.isSafeInteger(ms) ? ms : null;
}

/** A duration header's milliseconds within [min, max], or a 400 naming the header. */
export function durationHeader(name: string, text: string, minMs: number, maxMs: number): number {
  const ms = parseQstashDuration(text);
  if (ms === null) throw new QstashInputError(name, `"${text}" is not a duration such as 10s, 5m, 2h or 1d`);
  if (ms < minMs || ms > maxMs) throw new QstashInputError(name, `must be between ${minMs / 1000}s and ${maxMs / 1000}s`);
  return ms;
}
