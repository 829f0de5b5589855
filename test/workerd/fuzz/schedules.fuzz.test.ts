/** The API fuzzer (see harness.ts), schedules: POST /v1/schedules/preview, and schedules at their edges, previewed and stored. */
import fc from "fast-check";
import { describe, it } from "vitest";
import {
  ARBITRARY_BODIES_TITLE,
  arbitraryBodies,
  catalog,
  createChecked,
  type Endpoint,
  expectAnswered,
  expectCatalog,
  expectRejected,
  fail,
  fuzzFile,
  hostilePiece,
  SCHEDULE_SHAPE,
  send,
  TIMEOUT,
  validJob,
  whoArb,
} from "./harness";

const fx = fuzzFile("schedules");

describe("arbitrary JSON bodies", () => {
  const ENDPOINTS: Endpoint[] = [
    {
      label: "POST /v1/schedules/preview",
      method: "POST",
      path: () => "/v1/schedules/preview",
      shape: { schedule: SCHEDULE_SHAPE, from: null, count: null },
      accepted: [200],
      numRuns: 200,
    },
  ];

  it.each(ENDPOINTS)(ARBITRARY_BODIES_TITLE, (ep) => arbitraryBodies(fx, ep), TIMEOUT);
});

describe("schedule values: cron, zones, durations and instants at their edges", () => {
  /** Mostly valid values with some invalid ones: one bad field at a time is how edges get reached. */
  const mostly = <T, U>(valid: fc.Arbitrary<T>, invalid: fc.Arbitrary<U>) =>
    fc.oneof({ arbitrary: valid, weight: 4 }, { arbitrary: invalid, weight: 1 });

  const cronField = fc.constantFrom(
    "*",
    "*/1",
    "*/7",
    "0",
    "1",
    "5",
    "23",
    "29",
    "30",
    "31",
    "59",
    "1-5",
    "1-5/2",
    "1,2,3",
    "L",
    "LW",
    "15W",
    "5#3",
    "5L",
    "?",
    "H",
    "H/5",
    "JAN",
    "jan-mar",
    "MON-FRI",
    "SUN",
    "7",
  );
  const badCronField = fc.constantFrom(
    "*/0",
    "*/61",
    "60",
    "61",
    "-1",
    "5-1",
    "1,,2",
    "W",
    "5#6",
    "H(0-29)",
    "0-59/1000",
    "99999999999",
    "a",
    "",
  );
  const cronArb = mostly(
    fc.oneof(
      fc.array(cronField, { minLength: 5, maxLength: 6 }).map((f) => f.join(" ")),
      fc.constantFrom(
        "@daily",
        "@hourly",
        "@weekly",
        "@monthly",
        "@yearly",
        "@annually",
        "@midnight",
        "0 0 29 2 *",
        "0 0 31 2 1",
        "0 0 L 2 *",
        "0 0 31 * *",
        "30 2 * * *",
        "0 0 1 1 *",
        "* * * * * *",
        "0 0 29 2 1",
      ),
    ),
    fc.oneof(
      fc.array(fc.oneof(cronField, badCronField), { minLength: 4, maxLength: 7 }).map((f) => f.join(" ")),
      fc.constantFrom("@reboot", "@every 5m", "@", "0 0 30 2 *", "0 0 31 4 *"),
      hostilePiece,
    ),
  );
  const zoneArb = mostly(
    fc.constantFrom(
      "UTC",
      "Etc/UTC",
      "Europe/Berlin",
      "America/New_York",
      "Australia/Lord_Howe",
      "Pacific/Chatham",
      "Asia/Kathmandu",
      "America/St_Johns",
      "Pacific/Apia",
      "Pacific/Kiritimati",
      "Etc/GMT+12",
      "Etc/GMT-14",
      "Antarctica/Troll",
      "Africa/Casablanca",
      "EST",
      "utc",
      "europe/berlin",
    ),
    fc.oneof(fc.constantFrom("Mars/Olympus", "+05:30", "Europe/Berlin ", "", "Local"), hostilePiece),
  );
  /** Numbers at the edges of what a duration may be: the largest safe one per unit, and those around the last JS date. */
  const EDGE_DURATIONS = [
    "104249991d",
    "100000000d",
    "99999999d",
    "2501999792h",
    "2400000000h",
    "9999999999h",
    "9999999999m",
    "9999999999s",
    "9999999999d",
  ];
  /** Durations, their numbers spread over every magnitude; `maxCount` bounds the number. */
  const durationArb = (maxCount: number) => {
    const edges = EDGE_DURATIONS.filter((d) => Number.parseInt(d, 10) <= maxCount);
    return mostly(
      fc.oneof(
        ...(edges.length > 0 ? [fc.constantFrom(...edges)] : []),
        fc
          .tuple(
            fc.oneof(
              fc.integer({ min: 1, max: maxCount }),
              fc.tuple(fc.integer({ min: 1, max: 99 }), fc.integer({ min: 0, max: 8 })).map(([m, e]) => Math.min(maxCount, m * 10 ** e)),
            ),
            fc.constantFrom("s", "m", "h", "d"),
          )
          .map(([n, u]) => `${n}${u}`),
      ),
      fc.constantFrom("0s", "1w", "-1s", "1.5h", " 1h", "01h", "1H", "s", "", "1e3s", "10000000000s"),
    );
  };
  const instantArb = mostly(
    fc
      .tuple(
        fc.date({ min: new Date("0000-01-01T00:00:00.000Z"), max: new Date("9999-12-31T23:59:59.999Z"), noInvalidDate: true }),
        fc.constantFrom("Z", "Z", "+00:00", "-00:00", "+23:59", "-23:59", "+05:30"),
      )
      .map(([d, zone]) => d.toISOString().replace("Z", zone)),
    fc.constantFrom(
      "9999-12-31T23:59:59.999999999Z",
      "2026-02-29T00:00:00Z",
      "2030-01-01T00:00:00",
      "2030-01-01",
      "2030-01-01T00:00:00z",
      "+275760-09-13T00:00:00Z",
      "2030-01-01T24:00:00Z",
      "2030-01-01T00:00:60Z",
      "2030-01-01T00:00:00+24:00",
      "now",
      "",
    ),
  );
  const countArb = mostly(fc.integer({ min: 1, max: 100 }), fc.constantFrom(-1, 0, 101, 1.5, 1e9));
  const maxRunsArb = mostly(fc.integer({ min: 1, max: 1_000_000 }), fc.constantFrom(-1, 0, 1_000_001, 1.5));
  const scheduleArb = (maxCount: number) => {
    /** startAt, endAt and maxRuns, each present now and then. */
    const bounds = fc
      .tuple(fc.option(instantArb, { freq: 3 }), fc.option(instantArb, { freq: 3 }), fc.option(maxRunsArb, { freq: 3 }))
      .map(([startAt, endAt, maxRuns]) => ({
        ...(startAt !== null && { startAt }),
        ...(endAt !== null && { endAt }),
        ...(maxRuns !== null && { maxRuns }),
      }));
    return fc.oneof(
      {
        arbitrary: fc
          .tuple(fc.record({ cron: cronArb, timezone: zoneArb }, { requiredKeys: ["cron"] }), bounds)
          .map(([s, b]) => ({ ...s, ...b })),
        weight: 3,
      },
      { arbitrary: fc.tuple(fc.record({ every: durationArb(maxCount) }), bounds).map(([s, b]) => ({ ...s, ...b })), weight: 3 },
      { arbitrary: fc.record({ at: instantArb }), weight: 1 },
      { arbitrary: fc.record({ delay: durationArb(maxCount) }), weight: 1 },
      {
        arbitrary: fc.record(
          {
            cron: cronArb,
            timezone: zoneArb,
            at: instantArb,
            delay: durationArb(maxCount),
            every: durationArb(maxCount),
            startAt: instantArb,
            endAt: instantArb,
            maxRuns: maxRunsArb,
          },
          { requiredKeys: [] },
        ),
        weight: 1,
      },
    );
  };

  const MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
  const durationMs = (d: string) => {
    const m = /^([1-9]\d{0,9})(s|m|h|d)$/.exec(d);
    return m ? Number(m[1]) * MS[m[2] as keyof typeof MS] : null;
  };
  const FAR = Date.parse("2030-01-01T00:00:00Z");
  /** A schedule made safe to store: nothing in it may fire while the tests run. */
  function far(schedule: Record<string, unknown>): Record<string, unknown> {
    const s = { ...schedule };
    const soon = (v: unknown) => typeof v === "string" && !(Date.parse(v) >= FAR);
    if (s.cron !== undefined && (s.startAt === undefined || soon(s.startAt))) s.startAt = "2030-01-01T00:00:00Z";
    if (typeof s.every === "string" && (durationMs(s.every) ?? Infinity) < 3_600_000) s.every = "2h";
    if (typeof s.delay === "string" && (durationMs(s.delay) ?? Infinity) < 3_600_000) s.delay = "2h";
    if (s.every !== undefined && s.startAt !== undefined && soon(s.startAt)) s.startAt = "2030-01-01T00:00:00Z";
    if (typeof s.at === "string" && Date.parse(s.at) < FAR) s.at = "2031-01-01T00:00:00Z";
    return s;
  }

  async function previewProperty(maxCount: number, numRuns: number) {
    await fc.assert(
      fc.asyncProperty(
        fc
          .tuple(scheduleArb(maxCount), fc.option(instantArb, { freq: 3 }), fc.option(countArb, { freq: 4 }))
          .map(([schedule, from, count]) => ({ schedule, ...(from !== null && { from }), ...(count !== null && { count }) })),
        whoArb,
        async (body, who) => {
          const a = await send({ method: "POST", path: "/v1/schedules/preview", who, json: body });
          expectAnswered(a);
          if (a.status === 200 && !Array.isArray((a.body as { instants?: unknown }).instants)) fail(a, "a preview without instants");
          if (a.status !== 200) expectRejected(a, [400]);
        },
      ),
      { numRuns },
    );
  }

  async function createProperty(maxCount: number, numRuns: number) {
    let made = 0;
    const before = await catalog(fx);
    await fc.assert(
      fc.asyncProperty(scheduleArb(maxCount).map(far), whoArb, async (schedule, who) => {
        const sent = { ...validJob("schedule"), schedule };
        made += await createChecked({ method: "POST", path: "/v1/jobs", who, json: sent }, null, { statuses: [400] });
      }),
      { numRuns },
    );
    await expectCatalog(fx, before, made);
  }

  // Durations up to 99,999 units (273 years in days): every fire a preview lists stays a date.
  it("preview, 300 runs: 200 with instants or 400 JSON, never 5xx", () => previewProperty(99_999, 300), TIMEOUT);
  it(
    "create, 150 runs (nothing fires before 2030): 201 and readable, or 400 JSON, never 5xx; nothing stored when refused",
    () => createProperty(99_999, 150),
    TIMEOUT,
  );

  // Found by this fuzzer (a 500, and the job stored): {"every":"104249991d"} put fires past the
  // last JS date. Intervals are now at most 3650d and instants before 2100.
  it("durations up to 10 digits, preview, 300 runs ", () => previewProperty(9_999_999_999, 300), TIMEOUT);
  it("durations up to 10 digits, create, 150 runs ", () => createProperty(9_999_999_999, 150), TIMEOUT);
});
