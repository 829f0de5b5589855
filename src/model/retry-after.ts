/**
 * A target's Retry-After (RFC 9110, section 10.2.3): delay-seconds or an HTTP-date. What a
 * target says is input from outside: a value too long to be a number, a date decades ahead or a
 * header that is neither must not park a run for years, nor make its due time Infinity.
 */

/**
 * The longest wait any Retry-After may ask for: a day, the longest `backoff.maxMs` a job may set
 * and QStash's own longest retry delay. A job's own wait is shorter still (`retryAfterCap`).
 */
export const MAX_RETRY_AFTER_MS = 86_400_000;

const DAY = "(Mon|Tue|Wed|Thu|Fri|Sat|Sun)";
const LONG_DAY = "(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)";
const MONTH = "(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)";
const TIME = "\\d{2}:\\d{2}:\\d{2}";
/** The three forms of an HTTP-date a recipient must accept (RFC 9110, section 5.6.7): IMF-fixdate, then the obsolete RFC 850 and asctime forms. */
const HTTP_DATES = [
  new RegExp(`^${DAY}, \\d{2} ${MONTH} \\d{4} ${TIME} GMT$`),
  new RegExp(`^${LONG_DAY}, \\d{2}-${MONTH}-\\d{2} ${TIME} GMT$`),
  new RegExp(`^${DAY} ${MONTH} [ \\d]\\d ${TIME} \\d{4}$`),
];

/**
 * Retry-After in ms from `nowMs`, at most MAX_RETRY_AFTER_MS; undefined when absent or neither
 * form (garbage is ignored, as if the target had sent none). A date in the past is 0.
 */
export function parseRetryAfter(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  // Digits only: any number of them is a wait, and one past the cap is the cap.
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, MAX_RETRY_AFTER_MS);
  const form = HTTP_DATES.findIndex((re) => re.test(text));
  if (form < 0) return undefined;
  // asctime carries no zone: it is GMT (RFC 9110). A two-digit RFC 850 year is read by Date.parse as 19xx/20xx.
  const at = Date.parse(form === 2 ? `${text} GMT` : text);
  if (Number.isNaN(at)) return undefined;
  return Math.min(Math.max(0, at - nowMs), MAX_RETRY_AFTER_MS);
}

/**
 * The longest a target's Retry-After may hold a job's retry: its `backoff.maxMs`, so that a run
 * waits no longer than its own policy says (a `forbid` or `buffer_one` job's next fires wait
 * behind it). A QStash message's delay, its Upstash-Retry-Delay or the target's Retry-After,
 * is bounded by the day QStash allows.
 */
export function retryAfterCap(backoffMaxMs: number, qstash: boolean): number {
  return qstash ? MAX_RETRY_AFTER_MS : backoffMaxMs;
}
