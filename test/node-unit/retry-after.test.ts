import { describe, expect, it } from "vitest";
import { MAX_RETRY_AFTER_MS, parseRetryAfter, retryAfterCap } from "../../src/model/retry-after";

describe("Retry-After", () => {
  const now = Date.UTC(2026, 0, 1);

  it("reads delay-seconds", () => {
    expect(parseRetryAfter("120", 0)).toBe(120_000);
    expect(parseRetryAfter(" 0 ", 0)).toBe(0);
  });

  it("caps a wait of 310 digits at the longest, a finite number", () => {
    const huge = `1${"0".repeat(309)}`;
    expect(Number(huge) * 1000).toBe(Number.POSITIVE_INFINITY); // the premise: read naively, it is Infinity
    expect(parseRetryAfter(huge, now)).toBe(MAX_RETRY_AFTER_MS);
    expect(parseRetryAfter("999999999", now)).toBe(MAX_RETRY_AFTER_MS);
  });

  it("reads the three HTTP-date forms of RFC 9110", () => {
    const at = now + 90_000; // Thu, 01 Jan 2026 00:01:30 GMT
    expect(parseRetryAfter(new Date(at).toUTCString(), now)).toBe(90_000);
    expect(parseRetryAfter("Thu, 01 Jan 2026 00:01:30 GMT", now)).toBe(90_000);
    expect(parseRetryAfter("Thursday, 01-Jan-26 00:01:30 GMT", now)).toBe(90_000);
    expect(parseRetryAfter("Thu Jan  1 00:01:30 2026", now)).toBe(90_000);
  });

  it("takes a date in the past as no wait, and one years ahead as the longest", () => {
    expect(parseRetryAfter("Wed, 31 Dec 2025 23:00:00 GMT", now)).toBe(0);
    expect(parseRetryAfter("Fri, 01 Jan 2100 00:00:00 GMT", now)).toBe(MAX_RETRY_AFTER_MS);
  });

  it("ignores what is neither form", () => {
    for (const garbage of ["soon", "-5", "1.5", "1e3", "0x10", "", "2026-01-01", "12 abc", "Thu, 01 Jan 2026", "Infinity", "NaN"]) {
      expect(parseRetryAfter(garbage, now), garbage).toBeUndefined();
    }
    expect(parseRetryAfter(null, now)).toBeUndefined();
  });

  it("holds a job's retry no longer than its backoff.maxMs, a QStash message's no longer than a day", () => {
    expect(retryAfterCap(300_000, false)).toBe(300_000);
    expect(retryAfterCap(100, true)).toBe(MAX_RETRY_AFTER_MS);
  });
});
