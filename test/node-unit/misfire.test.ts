import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { jitterOffset } from "../../src/schedule/jitter";
import { CATCH_UP_CAP, MISFIRE_GRACE_MS, planDueFires } from "../../src/schedule/misfire";
import { firesBetween, firstFire, nextFireAfter, upcomingFires } from "../../src/schedule/next-fire";

const T = (iso: string) => Date.parse(iso);
const MIN = 60_000;
const every = { every: "1m" };

describe("misfire policies (a job whose fires at 00:01 … 00:10 were missed, handled at 00:10:30)", () => {
  const anchor = T("2026-01-01T00:00:00Z");
  const now = T("2026-01-01T00:10:30Z");
  const plan = (policy: "skip" | "fire_once" | "catch_up", window = 3_600_000) =>
    planDueFires(every, anchor, anchor + MIN, now, policy, window);

  it("skip: only the on-time fire (00:10, within the grace) runs", () => {
    expect(plan("skip")).toEqual({ fires: [{ at: anchor + 10 * MIN, catchUp: false }], next: anchor + 11 * MIN });
  });
  it("fire_once: one catch-up run for the latest missed fire, plus the on-time one", () => {
    expect(plan("fire_once").fires).toEqual([
      { at: anchor + 9 * MIN, catchUp: true },
      { at: anchor + 10 * MIN, catchUp: false },
    ]);
  });
  it("catch_up: every missed fire inside the window", () => {
    expect(plan("catch_up").fires.map((f) => f.at)).toEqual(Array.from({ length: 10 }, (_, i) => anchor + (i + 1) * MIN));
    expect(plan("catch_up", 5 * MIN).fires.map((f) => (f.at - anchor) / MIN)).toEqual([6, 7, 8, 9, 10]);
  });
  it("catch_up is capped however long the outage", () => {
    const late = planDueFires(every, anchor, anchor + MIN, anchor + 1_000 * MIN, "catch_up", 7 * 86_400_000);
    expect(late.fires.filter((f) => f.catchUp)).toHaveLength(CATCH_UP_CAP);
    expect(late.next).toBe(anchor + 1_001 * MIN);
  });
  it("a one-off runs however late, whatever the policy", () => {
    const at = { at: "2026-01-01T00:00:00.000Z" };
    expect(planDueFires(at, 0, anchor, anchor + 86_400_000, "skip", 0)).toEqual({ fires: [{ at: anchor, catchUp: true }], next: null });
  });
  it("nothing late: every policy runs the due fire on time", () => {
    for (const policy of ["skip", "fire_once", "catch_up"] as const) {
      expect(planDueFires(every, anchor, anchor + MIN, anchor + MIN + MISFIRE_GRACE_MS / 2, policy, 0).fires).toEqual([
        { at: anchor + MIN, catchUp: false },
      ]);
    }
  });
  it("the next fire is always in the future and on the grid", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5_000 }), fc.constantFrom("skip", "fire_once", "catch_up"), (lateMinutes, policy) => {
        const { next } = planDueFires(every, anchor, anchor + MIN, anchor + lateMinutes * MIN + 1, policy as "skip", 3_600_000);
        expect(next! > anchor + lateMinutes * MIN).toBe(true);
        expect((next! - anchor) % MIN).toBe(0);
      }),
      { numRuns: 100 },
    );
  });
});

describe("jitter", () => {
  it("is fixed per (job, instant): these offsets stay, so a re-run alarm or a sweep finds the same one", () => {
    // FNV-1a 32 of "<job>@<instant>" modulo the window, computed independently; the instant is
    // 2026-01-02T00:00:00Z, 1767312000000. "job_0mx34t9ichmazsj5l8v@1767312000000" hashes to
    // 713870531, "job_000000000aaaaaaaaaa@…" to 972245986, "job_1@…" to 2586556267.
    const midnight = T("2026-01-02T00:00:00Z");
    expect(jitterOffset("job_0mx34t9ichmazsj5l8v", midnight, 30_000)).toBe(20_531);
    expect(jitterOffset("job_000000000aaaaaaaaaa", midnight, 3_600_000)).toBe(245_986);
    expect(jitterOffset("job_1", midnight, 1_000)).toBe(267);
  });
  it("is inside the window", () => {
    fc.assert(
      fc.property(fc.string(), fc.integer({ min: 0, max: 2 ** 45 }), fc.integer({ min: 1, max: 3_600_000 }), (job, at, window) => {
        const o = jitterOffset(job, at, window);
        expect(Number.isInteger(o)).toBe(true);
        expect(o).toBeGreaterThanOrEqual(0);
        expect(o).toBeLessThan(window);
      }),
    );
  });
  it("spreads a thousand midnight jobs over the window", () => {
    const midnight = T("2026-01-02T00:00:00Z");
    const seconds = new Set(Array.from({ length: 1000 }, (_, i) => Math.floor(jitterOffset(`job_${i}`, midnight, 30_000) / 1000)));
    expect(seconds.size).toBe(30); // every second of the 30 s window is used
  });
  it("no window, no offset", () => expect(jitterOffset("job", 1, 0)).toBe(0));
});

describe("bounds: startAt, endAt, maxRuns", () => {
  it("an interval anchored at startAt fires at startAt, then every interval", () => {
    const s = { every: "1h", startAt: "2030-01-01T06:00:00.000Z" };
    expect(upcomingFires(s, T("2026-01-01T00:00:00Z"), 3).map((t) => new Date(t).toISOString())).toEqual([
      "2030-01-01T06:00:00.000Z",
      "2030-01-01T07:00:00.000Z",
      "2030-01-01T08:00:00.000Z",
    ]);
  });
  it("a startAt already past keeps the grid it anchors", () => {
    const s = { every: "1h", startAt: "2026-01-01T00:30:00.000Z" };
    expect(firstFire(s, T("2026-01-01T05:00:00Z"))).toBe(T("2026-01-01T05:30:00Z"));
  });
  it("cron starts no earlier than startAt and stops at endAt", () => {
    const s = { cron: "0 * * * *", startAt: "2030-01-01T10:00:00.000Z", endAt: "2030-01-01T12:00:00.000Z" };
    expect(upcomingFires(s, T("2026-01-01T00:00:00Z"), 10).map((t) => new Date(t).toISOString())).toEqual([
      "2030-01-01T10:00:00.000Z",
      "2030-01-01T11:00:00.000Z",
      "2030-01-01T12:00:00.000Z",
    ]);
    expect(nextFireAfter(s, 0, T("2030-01-01T12:00:00Z"))).toBeNull();
  });
  it("maxRuns limits the preview", () => {
    expect(upcomingFires({ every: "1m", maxRuns: 2 }, 0, 10)).toEqual([MIN, 2 * MIN]);
  });
  it("firesBetween lists the fires in a closed range", () => {
    expect(firesBetween({ every: "1m" }, 0, 2 * MIN, 5 * MIN, 100)).toEqual([2 * MIN, 3 * MIN, 4 * MIN, 5 * MIN]);
    expect(firesBetween({ at: new Date(3 * MIN).toISOString() }, 0, 0, 5 * MIN, 100)).toEqual([3 * MIN]);
    expect(firesBetween({ every: "1s" }, 0, 0, 10 * MIN, 5)).toHaveLength(5);
  });
});
