import { describe, expect, it } from "vitest";
import { describeSchedule } from "../../src/schedule/describe";

describe("describeSchedule", () => {
  describe("cron", () => {
    it("in words, with its time zone", () => {
      expect(describeSchedule({ cron: "30 2 * * *", timezone: "Europe/Berlin" })).toBe("At 02:30 AM (Europe/Berlin)");
    });

    it("says UTC when no time zone is given", () => {
      expect(describeSchedule({ cron: "*/5 * * * *" })).toBe("Every 5 minutes (UTC)");
      expect(describeSchedule({ cron: "0 9 * * 1-5" })).toBe("At 09:00 AM, Monday through Friday (UTC)");
    });

    it("6 fields are read seconds first", () => {
      expect(describeSchedule({ cron: "15 30 2 * * *" })).toBe("At 02:30:15 AM (UTC)");
      expect(describeSchedule({ cron: "*/10 * * * * *" })).toBe("Every 10 seconds (UTC)");
      // cronstrue alone would take a 6-field expression with "?" here for minutes-first with a year.
      expect(describeSchedule({ cron: "0 0 12 * * ?" })).toBe("At 12:00 PM (UTC)");
    });

    it("macros and extra whitespace", () => {
      expect(describeSchedule({ cron: "@daily" })).toBe("At 12:00 AM (UTC)");
      expect(describeSchedule({ cron: " 0\t9  * * MON " })).toBe("At 09:00 AM, only on Monday (UTC)");
    });

    it("what cronstrue cannot word (cron-parser's hashed H) is shown as written", () => {
      expect(describeSchedule({ cron: "H 2 * * *", timezone: "Asia/Tokyo" })).toBe('On the cron schedule "H 2 * * *" (Asia/Tokyo)');
    });
  });

  describe("every", () => {
    it.each([
      ["15m", "Every 15 minutes"],
      ["1h", "Every hour"],
      ["60m", "Every hour"],
      ["90s", "Every 90 seconds"],
      ["120m", "Every 2 hours"],
      ["1d", "Every day"],
      ["36h", "Every 36 hours"],
    ])("%s: %s", (every, words) => {
      expect(describeSchedule({ every })).toBe(words);
    });
  });

  describe("one-offs", () => {
    it("at: the instant in UTC, whatever offset it was written with", () => {
      expect(describeSchedule({ at: "2026-12-24T18:00:00.000Z" })).toBe("Once, at 2026-12-24T18:00:00.000Z");
      expect(describeSchedule({ at: "2026-12-24T19:00:00+01:00" })).toBe("Once, at 2026-12-24T18:00:00.000Z");
    });

    it("delay: how long after creation", () => {
      expect(describeSchedule({ delay: "10m" })).toBe("Once, 10 minutes after creation");
      expect(describeSchedule({ delay: "1d" })).toBe("Once, 1 day after creation");
    });
  });

  describe("bounds", () => {
    const startAt = "2026-01-01T00:00:00Z";
    const endAt = "2026-02-01T00:00:00Z";

    it("from, until and at most N times, in that order", () => {
      expect(describeSchedule({ every: "15m", startAt, endAt, maxRuns: 10 })).toBe(
        "Every 15 minutes, from 2026-01-01T00:00:00.000Z until 2026-02-01T00:00:00.000Z, at most 10 times",
      );
    });

    it("each alone", () => {
      expect(describeSchedule({ every: "1h", startAt })).toBe("Every hour, from 2026-01-01T00:00:00.000Z");
      expect(describeSchedule({ cron: "0 0 * * *", timezone: "America/New_York", endAt })).toBe(
        "At 12:00 AM (America/New_York), until 2026-02-01T00:00:00.000Z",
      );
      expect(describeSchedule({ every: "30s", maxRuns: 3 })).toBe("Every 30 seconds, at most 3 times");
      expect(describeSchedule({ every: "30s", maxRuns: 1 })).toBe("Every 30 seconds, at most once");
    });
  });
});
