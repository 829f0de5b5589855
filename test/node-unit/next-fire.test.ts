import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { cronError, nextCronFire } from "../../src/schedule/cron";
import { firstFire, nextFireAfter } from "../../src/schedule/next-fire";

const T = (iso: string) => Date.parse(iso);
const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

describe("cron", () => {
  it("5 fields: the next matching minute, strictly after", () => {
    expect(iso(nextFireAfter({ cron: "*/5 * * * *" }, 0, T("2026-01-01T00:04:59.500Z")))).toBe("2026-01-01T00:05:00.000Z");
    expect(iso(nextFireAfter({ cron: "*/5 * * * *" }, 0, T("2026-01-01T00:05:00.000Z")))).toBe("2026-01-01T00:10:00.000Z");
  });

  it("6 fields: seconds first", () => {
    expect(iso(nextFireAfter({ cron: "*/15 * * * * *" }, 0, T("2026-01-01T00:00:01.000Z")))).toBe("2026-01-01T00:00:15.000Z");
  });

  it("evaluates in the job's time zone", () => {
    // 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
    expect(iso(nextFireAfter({ cron: "0 9 * * *", timezone: "Europe/Berlin" }, 0, T("2026-01-15T00:00:00Z")))).toBe(
      "2026-01-15T08:00:00.000Z",
    );
    expect(iso(nextFireAfter({ cron: "0 9 * * *", timezone: "Europe/Berlin" }, 0, T("2026-07-15T00:00:00Z")))).toBe(
      "2026-07-15T07:00:00.000Z",
    );
    expect(iso(nextFireAfter({ cron: "0 9 * * *", timezone: "America/New_York" }, 0, T("2026-01-15T00:00:00Z")))).toBe(
      "2026-01-15T14:00:00.000Z",
    );
  });

  it("the first fire of a cron job is its next match after creation", () => {
    expect(iso(firstFire({ cron: "0 * * * *" }, T("2026-03-01T10:30:00Z")))).toBe("2026-03-01T11:00:00.000Z");
  });

  it("is always strictly after, and no match is skipped (against a minute-by-minute walk)", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: T("2026-01-01T00:00:00Z"), max: T("2027-01-01T00:00:00Z") }),
        fc.constantFrom("*/7 * * * *", "0 * * * *", "15,45 3-5 * * *"),
        (after, cron) => {
          const next = nextCronFire(cron, "UTC", after)!;
          expect(next).toBeGreaterThan(after);
          // Brute force: the first whole minute after `after` whose fields match.
          const [m, h] = cron.split(" ");
          const matches = (field: string, v: number) =>
            field === "*" ||
            field.split(",").some((part) => {
              if (part.startsWith("*/")) return v % Number(part.slice(2)) === 0;
              if (part.includes("-")) {
                const [a, b] = part.split("-").map(Number);
                return v >= a! && v <= b!;
              }
              return Number(part) === v;
            });
          let t = Math.floor(after / 60_000) * 60_000 + 60_000;
          while (!(matches(m!, new Date(t).getUTCMinutes()) && matches(h!, new Date(t).getUTCHours()))) t += 60_000;
          expect(next).toBe(t);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("cronError", () => {
  it.each(["* * * * *", "*/5 * * * *", "0 0 9 * * MON-FRI", "@hourly", "@daily", "0 0 L * *", "0 12 * JAN,JUL *"])("accepts %j", (cron) => {
    expect(cronError(cron)).toBeNull();
  });
  it.each([
    ["61 * * * *", "invalid cron expression"],
    ["* * * *", "5 fields"],
    ["* * * * * * *", "5 fields"],
    ["hello world", "5 fields"],
    ["* * 32 * *", "invalid cron expression"],
    ["@sometimes", "invalid cron expression"],
  ])("rejects %j: %s", (cron, reason) => {
    expect(cronError(cron)).toContain(reason);
  });
});

describe("at", () => {
  it("fires once at its instant, even one already past (the user asked for it to run)", () => {
    expect(firstFire({ at: "2030-01-01T00:00:00.000Z" }, T("2026-01-01T00:00:00Z"))).toBe(T("2030-01-01T00:00:00Z"));
    expect(firstFire({ at: "2020-01-01T00:00:00.000Z" }, T("2026-01-01T00:00:00Z"))).toBe(T("2020-01-01T00:00:00Z"));
    expect(nextFireAfter({ at: "2030-01-01T00:00:00.000Z" }, 0, 0)).toBeNull();
  });
});

describe("every", () => {
  it("first fire is one interval after creation", () => {
    expect(firstFire({ every: "30s" }, 1_000)).toBe(31_000);
  });

  it("stays on the grid anchor + k·every and is strictly after", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 40 }),
        fc.integer({ min: 0, max: 2 ** 36 }),
        fc.constantFrom(["1s", 1_000], ["30s", 30_000], ["5m", 300_000], ["2h", 7_200_000], ["1d", 86_400_000]),
        (anchor, offset, [every, ms]) => {
          const after = anchor + offset;
          const next = nextFireAfter({ every: every as string }, anchor, after)!;
          expect(next).toBeGreaterThan(after);
          expect(next - after).toBeLessThanOrEqual(ms as number);
          expect((next - anchor) % (ms as number)).toBe(0);
        },
      ),
    );
  });

  it("a late alarm does not drift the series", () => {
    // Fire due at 60 s handled at 61.5 s: the next is 90 s, not 91.5 s.
    expect(nextFireAfter({ every: "30s" }, 0, 61_500)).toBe(90_000);
  });
});
