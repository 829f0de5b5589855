/**
 * Cron in IANA zones, checked against a brute-force reference around real offset transitions.
 *
 * The rules (what a job's fires are):
 * - A job fires at every real instant whose wall-clock time in its zone matches the expression,
 *   and at no other, except for jobs at a *fixed local time*.
 * - A fixed local time is an expression whose hour, minute and second fields each match exactly
 *   one value (for 5 fields the second is always 0): `30 2 * * *`, `0 0 0 * * SUN`, `@daily`.
 *   A wildcard, a step (every 15 minutes), a list or a range (of more than one value) in any of
 *   those three fields makes a job not fixed.
 * - A fixed local time skipped by a spring-forward change fires exactly once, at the first real
 *   instant after the gap (the wall-clock time the gap jumps to: 03:00 for a 02:30 job on a
 *   02:00→03:00 night).
 * - A fixed local time that occurs twice in a fall-back change fires once, at its first occurrence.
 * - Any other job fires at every real matching instant (both passes through a repeated hour)
 *   and simply has no skipped wall-clock times.
 *
 * The reference walks every minute (every second for 6 fields) of a window around each
 * transition that Intl reports, reads the wall clock with Intl.DateTimeFormat, matches fields it
 * generated itself (not cron-parser's), and applies the rules above.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { cronError, nextCronFire } from "../../src/schedule/cron";

const SECOND = 1_000;
const MINUTE = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;

const ZONES = [
  "Europe/Berlin",
  "America/New_York",
  "Australia/Sydney",
  "Pacific/Chatham", // +12:45/+13:45, changes at 02:45 and 03:45
  "Australia/Lord_Howe", // 30-minute shift
  "America/Havana", // springs forward at midnight
  "Asia/Beirut", // both changes at midnight; falling back repeats 23:xx of the day before
  "America/Santiago", // both changes at midnight
  "America/Asuncion", // on permanent -03 since October 2024: no transitions with current tzdata
];

// ---------------------------------------------------------------------------------------------
// Wall clocks straight from Intl (the reference does not use the code under test's offset logic).

const formats = new Map<string, Intl.DateTimeFormat>();
/** The wall-clock time in `zone` at the whole second `t`, as the UTC instant with the same fields. */
function wall(zone: string, t: number): number {
  let format = formats.get(zone);
  if (!format) {
    format = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    formats.set(zone, format);
  }
  const p: Record<string, number> = {};
  for (const { type, value } of format.formatToParts(t)) p[type] = Number(value);
  return Date.UTC(p.year!, p.month! - 1, p.day!, p.hour!, p.minute!, p.second!);
}
const offset = (zone: string, t: number) => wall(zone, t) - t;

interface Transition {
  zone: string;
  at: number; // first instant on the new offset
  from: number; // offset before, ms
  to: number; // offset after, ms
}

/** Transitions in [from, to), found by sampling offsets every 6 h and bisecting to the second. */
function transitions(zone: string, from: number, to: number): Transition[] {
  const found: Transition[] = [];
  let prev = offset(zone, from);
  for (let t = from + 6 * HOUR; t < to; t += 6 * HOUR) {
    const cur = offset(zone, t);
    if (cur === prev) continue;
    let lo = t - 6 * HOUR;
    let hi = t;
    while (hi - lo > SECOND) {
      const mid = lo + Math.floor((hi - lo) / 2 / SECOND) * SECOND;
      if (offset(zone, mid) === prev) lo = mid;
      else hi = mid;
    }
    found.push({ zone, at: hi, from: prev, to: cur });
    prev = cur;
  }
  return found;
}

const ALL = ZONES.flatMap((zone) => transitions(zone, Date.UTC(2025, 0, 1), Date.UTC(2028, 0, 1)));

/** A stretch of real time with the wall clock at every grid point. */
interface Window {
  zone: string;
  start: number;
  step: number;
  walls: number[]; // walls[i] is the wall clock at start + i·step
  end: number; // exclusive
}
const windowCache = new Map<string, Window>();
function window(tr: Transition, before: number, after: number, step: number): Window {
  const key = `${tr.zone} ${tr.at} ${before} ${after} ${step}`;
  let w = windowCache.get(key);
  if (!w) {
    const start = Math.floor((tr.at - before) / step) * step;
    const end = tr.at + after;
    const walls: number[] = [];
    for (let t = start; t < end; t += step) {
      // Second by second, Intl is asked once a minute: offsets change on whole minutes, which
      // the check at the minute's last second confirms.
      if (step === SECOND && t % MINUTE !== 0) walls.push(walls.at(-1)! + SECOND);
      else walls.push(wall(tr.zone, t));
      if (step === SECOND && t % MINUTE === 59 * SECOND && wall(tr.zone, t) !== walls.at(-1))
        throw new Error(`offset changed mid-minute at ${t}`);
    }
    w = { zone: tr.zone, start, step, walls, end };
    windowCache.set(key, w);
  }
  return w;
}
/** Windows of three days around a transition, walked minute by minute (5 fields). */
const minuteWindow = (tr: Transition) => window(tr, 36 * HOUR, 36 * HOUR, MINUTE);
/** Two hours around a transition, walked second by second (6 fields). */
const secondWindow = (tr: Transition) => window(tr, HOUR, HOUR, SECOND);

// ---------------------------------------------------------------------------------------------
// Expressions, generated together with the values each field matches.

interface Spec {
  expr: string;
  second: readonly number[];
  minute: readonly number[];
  hour: readonly number[];
  dom: readonly number[]; // 1..31
  domLast: boolean; // `L`: the last day of the month
  domStar: boolean;
  month: readonly number[]; // 1..12
  dow: readonly number[]; // 0..6, Sunday 0
  dowNth: number; // `SUN#2`: only the nth of those weekdays in the month (0: any)
  dowLast: readonly number[]; // `0L`: the last of these weekdays in the month
  dowStar: boolean;
}
const isFixed = (s: Spec) => s.second.length === 1 && s.minute.length === 1 && s.hour.length === 1;

function matches(s: Spec, wallMs: number): boolean {
  const d = new Date(wallMs);
  if (!s.second.includes(d.getUTCSeconds()) || !s.minute.includes(d.getUTCMinutes()) || !s.hour.includes(d.getUTCHours())) return false;
  if (!s.month.includes(d.getUTCMonth() + 1)) return false;
  const lastDay = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 0)).getUTCDate();
  const domOk = s.dom.includes(d.getUTCDate()) || (s.domLast && d.getUTCDate() === lastDay);
  const dowOk =
    (s.dow.includes(d.getUTCDay()) && (s.dowNth === 0 || Math.ceil(d.getUTCDate() / 7) === s.dowNth)) ||
    (s.dowLast.includes(d.getUTCDay()) && d.getUTCDate() + 7 > lastDay);
  // Classic cron: when both day fields are restricted, either may match.
  if (!s.domStar && !s.dowStar) return domOk || dowOk;
  return domOk && dowOk;
}

/** The reference: every fire in (w.start, w.end) by the rules in the header. */
function referenceFires(s: Spec, w: Window): number[] {
  const fixed = isFixed(s);
  const seen = new Set<number>();
  const fires: number[] = [];
  for (let i = 0; i < w.walls.length; i++) {
    const t = w.start + i * w.step;
    const here = w.walls[i]!;
    let fire = matches(s, here) && !(fixed && seen.has(here)); // fixed: first occurrence only
    seen.add(here);
    if (fixed && i > 0 && here - w.walls[i - 1]! > w.step) {
      // The clock jumped: a fixed time in the skipped wall-clock times fires now, once.
      for (let skipped = w.walls[i - 1]! + w.step; skipped < here; skipped += w.step) {
        if (matches(s, skipped)) fire = true;
      }
    }
    if (fire && t > w.start) fires.push(t);
  }
  return fires;
}

function implementationFires(expr: string, w: Window): number[] {
  const fires: number[] = [];
  let after = w.start;
  for (;;) {
    const next = nextCronFire(expr, w.zone, after);
    if (next === null || next >= w.end) return fires;
    if (next <= after) throw new Error(`not strictly after: ${label(w.zone, next)} after ${label(w.zone, after)}`);
    fires.push(next);
    if (fires.length > 10_000) throw new Error("runaway");
    after = next;
  }
}

const localFormats = new Map<string, Intl.DateTimeFormat>();
/** `2025-03-30T01:00:00Z (03:00:00 +02:00)`, to read failures. */
function label(zone: string, t: number): string {
  let f = localFormats.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-GB", {
      timeZone: zone,
      hourCycle: "h23",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
      timeZoneName: "longOffset",
    });
    localFormats.set(zone, f);
  }
  return `${new Date(t).toISOString().replace(".000", "")} (${f.format(t).replace("GMT", "")})`;
}
const labels = (zone: string, ts: number[]) => ts.map((t) => label(zone, t));

const range = (lo: number, hi: number, step = 1) => Array.from({ length: Math.floor((hi - lo) / step) + 1 }, (_, i) => lo + i * step);
interface Field {
  text: string;
  values: readonly number[];
}
const MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/**
 * One time field: a single value (biased towards `hot` ones, where transitions happen), a list,
 * a short range, a step over the whole field (star-slash-k, k ≥ minStep) or over a range (`a-b/k`).
 * `*` itself only when `star` (a bare `*` minute would make every window thousands of fires).
 */
function timeField(min: number, max: number, hot: number[], minStep: number, star: boolean): fc.Arbitrary<Field> {
  const value = fc.oneof(fc.constantFrom(...hot), fc.integer({ min, max }));
  const options: fc.Arbitrary<Field>[] = [
    value.map((v) => ({ text: `${v}`, values: [v] })),
    value.map((v) => ({ text: `${v}`, values: [v] })),
    fc.uniqueArray(value, { minLength: 2, maxLength: 3 }).map((vs) => {
      const sorted = [...vs].sort((a, b) => a - b);
      return { text: vs.join(","), values: sorted };
    }),
    fc.tuple(value, fc.integer({ min: 0, max: 4 })).map(([a, n]) => {
      const b = Math.min(max, a + n);
      return { text: `${a}-${b}`, values: range(a, b) };
    }),
    fc
      .integer({ min: minStep, max: Math.max(minStep, Math.floor((max - min + 1) / 2)) })
      .map((k) => ({ text: `*/${k}`, values: range(min, max, k) })),
    fc.tuple(value, fc.integer({ min: 1, max: 12 }), fc.integer({ min: minStep, max: minStep + 10 })).map(([a, n, k]) => {
      const b = Math.min(max, a + n);
      return { text: `${a}-${b}/${k}`, values: range(a, b, k) };
    }),
  ];
  if (star) options.push(fc.constant({ text: "*", values: range(min, max) }));
  return fc.oneof(...options);
}

const dayOfMonth: fc.Arbitrary<Field & { last: boolean }> = fc.oneof(
  { weight: 6, arbitrary: fc.constant({ text: "*", values: range(1, 31), last: false }) },
  { weight: 1, arbitrary: fc.constant({ text: "L", values: [], last: true }) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 31 }).map((d) => ({ text: `${d}`, values: [d], last: false })) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 21 }).map((d) => ({ text: `${d}-${d + 10}`, values: range(d, d + 10), last: false })) },
  {
    weight: 1,
    arbitrary: fc
      .uniqueArray(fc.integer({ min: 1, max: 31 }), { minLength: 2, maxLength: 4 })
      .map((ds) => ({ text: ds.join(","), values: ds, last: false })),
  },
);
const month: fc.Arbitrary<Field> = fc.oneof(
  { weight: 6, arbitrary: fc.constant({ text: "*", values: range(1, 12) }) },
  { weight: 1, arbitrary: fc.constant({ text: "MAR,APR,SEP,OCT,NOV", values: [3, 4, 9, 10, 11] }) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 12 }).map((m) => ({ text: MONTHS[m - 1]!, values: [m] })) },
  { weight: 1, arbitrary: fc.constant({ text: "3-11", values: range(3, 11) }) },
);
type DayOfWeek = Field & { nth: number; last: readonly number[] };
const weekday = fc.oneof(fc.constantFrom(0, 6), fc.integer({ min: 0, max: 6 })); // clocks change on Sundays (Saturdays in Santiago, Beirut)
const dayOfWeek: fc.Arbitrary<DayOfWeek> = fc.oneof(
  { weight: 8, arbitrary: fc.constant({ text: "*", values: range(0, 6), nth: 0, last: [] }) },
  { weight: 1, arbitrary: weekday.map((d) => ({ text: DAYS[d]!, values: [d], nth: 0, last: [] })) },
  { weight: 1, arbitrary: fc.constant({ text: "7", values: [0], nth: 0, last: [] }) },
  { weight: 1, arbitrary: fc.constant({ text: "SAT,SUN", values: [0, 6], nth: 0, last: [] }) },
  { weight: 1, arbitrary: fc.constant({ text: "MON-FRI", values: [1, 2, 3, 4, 5], nth: 0, last: [] }) },
  { weight: 1, arbitrary: fc.constant({ text: "0,6", values: [0, 6], nth: 0, last: [] }) },
  // The last Sunday (`0L`, `7L`), the nth Sunday (`SUN#2`): how most zones pick the night.
  {
    weight: 1,
    arbitrary: fc
      .tuple(weekday, fc.boolean())
      .map(([d, seven]) => ({ text: `${seven && d === 0 ? 7 : d}L`, values: [], nth: 0, last: [d] })),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(weekday, fc.integer({ min: 1, max: 5 }))
      .map(([d, n]) => ({ text: `${DAYS[d]}#${n}`, values: [d], nth: n, last: [] })),
  },
);

const HOT_MINUTES = [0, 15, 30, 44, 45, 59];
const HOT_HOURS = [0, 1, 2, 3, 4, 22, 23];

/**
 * An expression; with `near`, mostly at that local time or in that hour (a wall-clock time close
 * to a change, so that fixed times in gaps and repeats come up often).
 */
function spec(seconds: boolean, near?: { hour: number; minute: number }): fc.Arbitrary<Spec> {
  const single = (v: number) => fc.constant({ text: `${v}`, values: [v] });
  return fc
    .record({
      second: seconds ? timeField(0, 59, [0, 30, 59], 10, false) : fc.constant({ text: "", values: [0] }),
      minute: near
        ? fc.oneof({ weight: 3, arbitrary: single(near.minute) }, { weight: 2, arbitrary: timeField(0, 59, [near.minute], 5, false) })
        : timeField(0, 59, HOT_MINUTES, 5, false),
      hour: near
        ? fc.oneof({ weight: 3, arbitrary: single(near.hour) }, { weight: 1, arbitrary: timeField(0, 23, [near.hour], 1, true) })
        : timeField(0, 23, HOT_HOURS, 1, true),
      dom: dayOfMonth,
      month,
      dow: dayOfWeek,
    })
    .map(({ second, minute, hour, dom, month, dow }) => ({
      expr: [...(seconds ? [second.text] : []), minute.text, hour.text, dom.text, month.text, dow.text].join(" "),
      second: second.values,
      minute: minute.values,
      hour: hour.values,
      dom: dom.values,
      domLast: dom.last,
      domStar: dom.text === "*",
      month: month.values,
      dow: dow.values,
      dowNth: dow.nth,
      dowLast: dow.last,
      dowStar: dow.text === "*",
    }))
    .filter((s) => cronError(s.expr) === null); // e.g. `31 APR` is refused up front, never evaluated
}

/** A spec from a plain 6-field expression of numbers, `*` and lists (for macros and examples). */
function plain(expr6: string): Omit<Spec, "expr"> {
  const [s, m, h, dom, mon, dow] = expr6.split(" ") as [string, string, string, string, string, string];
  const field = (text: string, lo: number, hi: number) =>
    text === "*"
      ? range(lo, hi)
      : text.split(",").flatMap((p) => (p.includes("-") ? range(...(p.split("-").map(Number) as [number, number])) : [Number(p)]));
  return {
    second: field(s, 0, 59),
    minute: field(m, 0, 59),
    hour: field(h, 0, 23),
    dom: field(dom, 1, 31),
    domLast: false,
    domStar: dom === "*",
    month: field(mon, 1, 12),
    dow: field(dow, 0, 6),
    dowNth: 0,
    dowLast: [],
    dowStar: dow === "*",
  };
}

const MACROS: Spec[] = [
  ["@yearly", "0 0 0 1 1 *"],
  ["@annually", "0 0 0 1 1 *"],
  ["@monthly", "0 0 0 1 * *"],
  ["@weekly", "0 0 0 * * 0"],
  ["@daily", "0 0 0 * * *"],
  ["@hourly", "0 0 * * * *"],
  ["@minutely", "0 * * * * *"],
  ["@weekdays", "0 0 0 * * 1-5"],
  ["@weekends", "0 0 0 * * 0,6"],
].map(([expr, six]) => ({ expr: expr!, ...plain(six!) }));

// ---------------------------------------------------------------------------------------------

const T = (iso: string) => Date.parse(iso);

describe("the transitions under test (from Intl)", () => {
  it("every zone but Asuncion changes offset in 2025-2027; Havana, Beirut and Santiago at midnight", () => {
    const zonesWith = new Set(ALL.map((tr) => tr.zone));
    expect(ZONES.filter((z) => !zonesWith.has(z))).toEqual(["America/Asuncion"]);
    // Which changes start or end at local midnight: the wall clock before or after reads 00:00.
    const midnight = ALL.filter((tr) => (tr.at + tr.from) % DAY === 0 || (tr.at + tr.to) % DAY === 0).map((tr) => tr.zone);
    expect([...new Set(midnight)].sort()).toEqual(["America/Havana", "America/Santiago", "Asia/Beirut"]);
    expect(ALL.some((tr) => tr.zone === "Australia/Lord_Howe" && Math.abs(tr.to - tr.from) === 30 * MINUTE)).toBe(true);
    expect(ALL.length).toBe(8 * 6);
  });
});

describe("across transitions (examples)", () => {
  it.each([
    // Spring forward: the skipped time fires once, when the gap ends.
    [
      "30 2 * * *",
      "Europe/Berlin",
      "2025-03-29T12:00:00Z",
      ["2025-03-30T01:00:00Z (03:00:00 +02:00)", "2025-03-31T00:30:00Z (02:30:00 +02:00)"],
    ],
    [
      "30 30 2 * * *",
      "Europe/Berlin",
      "2025-03-29T12:00:00Z",
      ["2025-03-30T01:00:00Z (03:00:00 +02:00)", "2025-03-31T00:30:30Z (02:30:30 +02:00)"],
    ],
    [
      "15 2 * * *",
      "Australia/Lord_Howe",
      "2025-10-04T00:00:00Z",
      ["2025-10-04T15:30:00Z (02:30:00 +11:00)", "2025-10-05T15:15:00Z (02:15:00 +11:00)"],
    ],
    [
      "30 0 * * *",
      "America/Havana",
      "2025-03-08T12:00:00Z",
      ["2025-03-09T05:00:00Z (01:00:00 -04:00)", "2025-03-10T04:30:00Z (00:30:00 -04:00)"],
    ],
    ["@daily", "Asia/Beirut", "2025-03-29T00:00:00Z", ["2025-03-29T22:00:00Z (01:00:00 +03:00)", "2025-03-30T21:00:00Z (00:00:00 +03:00)"]],
    [
      "@daily",
      "America/Santiago",
      "2025-09-06T12:00:00Z",
      ["2025-09-07T04:00:00Z (01:00:00 -03:00)", "2025-09-08T03:00:00Z (00:00:00 -03:00)"],
    ],
    [
      "15 3 * * *",
      "Pacific/Chatham",
      "2025-09-27T00:00:00Z",
      ["2025-09-27T14:00:00Z (03:45:00 +13:45)", "2025-09-28T13:30:00Z (03:15:00 +13:45)"],
    ],
    [
      "30 2 * * SUN",
      "America/New_York",
      "2025-03-08T00:00:00Z",
      ["2025-03-09T07:00:00Z (03:00:00 -04:00)", "2025-03-16T06:30:00Z (02:30:00 -04:00)"],
    ],
    // Fall back: the repeated time fires once, on its first pass.
    [
      "30 2 * * *",
      "Europe/Berlin",
      "2025-10-25T12:00:00Z",
      ["2025-10-26T00:30:00Z (02:30:00 +02:00)", "2025-10-27T01:30:00Z (02:30:00 +01:00)"],
    ],
    [
      "30 1 * * *",
      "America/New_York",
      "2025-11-01T12:00:00Z",
      ["2025-11-02T05:30:00Z (01:30:00 -04:00)", "2025-11-03T06:30:00Z (01:30:00 -05:00)"],
    ],
    [
      "45 1 * * *",
      "Australia/Lord_Howe",
      "2025-04-05T00:00:00Z",
      ["2025-04-05T14:45:00Z (01:45:00 +11:00)", "2025-04-06T15:15:00Z (01:45:00 +10:30)"],
    ],
    [
      "30 23 * * *",
      "Asia/Beirut",
      "2025-10-25T12:00:00Z",
      ["2025-10-25T20:30:00Z (23:30:00 +03:00)", "2025-10-26T21:30:00Z (23:30:00 +02:00)"],
    ],
    [
      "0 3 * * *",
      "Pacific/Chatham",
      "2025-04-05T00:00:00Z",
      ["2025-04-05T13:15:00Z (03:00:00 +13:45)", "2025-04-06T14:15:00Z (03:00:00 +12:45)"],
    ],
    // Not fixed: every real matching instant, both passes through the repeated hour.
    [
      "*/30 * * * *",
      "America/New_York",
      "2025-11-02T04:50:00Z",
      [
        "2025-11-02T05:00:00Z (01:00:00 -04:00)",
        "2025-11-02T05:30:00Z (01:30:00 -04:00)",
        "2025-11-02T06:00:00Z (01:00:00 -05:00)",
        "2025-11-02T06:30:00Z (01:30:00 -05:00)",
      ],
    ],
    [
      "0 */2 * * *",
      "America/Havana",
      "2025-11-02T03:30:00Z",
      ["2025-11-02T04:00:00Z (00:00:00 -04:00)", "2025-11-02T05:00:00Z (00:00:00 -05:00)", "2025-11-02T07:00:00Z (02:00:00 -05:00)"],
    ],
    [
      "*/30 23 * * *",
      "Asia/Beirut",
      "2025-10-25T19:30:00Z",
      [
        "2025-10-25T20:00:00Z (23:00:00 +03:00)",
        "2025-10-25T20:30:00Z (23:30:00 +03:00)",
        "2025-10-25T21:00:00Z (23:00:00 +02:00)",
        "2025-10-25T21:30:00Z (23:30:00 +02:00)",
      ],
    ],
    [
      "0 * * * *",
      "Europe/Berlin",
      "2025-03-30T00:30:00Z",
      ["2025-03-30T01:00:00Z (03:00:00 +02:00)", "2025-03-30T02:00:00Z (04:00:00 +02:00)"],
    ],
    [
      "15,45 2 * * *",
      "Europe/Berlin",
      "2025-03-29T12:00:00Z",
      ["2025-03-31T00:15:00Z (02:15:00 +02:00)", "2025-03-31T00:45:00Z (02:45:00 +02:00)"],
    ],
  ])("%s in %s after %s", (expr, zone, after, expected) => {
    const fires: number[] = [];
    let t = T(after);
    for (const _ of expected) {
      t = nextCronFire(expr, zone, t)!;
      fires.push(t);
    }
    expect(labels(zone, fires)).toEqual(expected);
  });
});

describe("against the brute-force reference around every transition in 2025-2027", () => {
  const transition = fc.integer({ min: 0, max: ALL.length - 1 }).map((i) => ALL[i]!);

  /** A transition, and the local time up to `minutes` from it on the clock before it, mostly in the changed hour. */
  const nearTransition = (minutes: number) =>
    fc
      .tuple(
        transition,
        fc.oneof(
          { weight: 1, arbitrary: fc.integer({ min: -minutes, max: minutes }) },
          { weight: 2, arbitrary: fc.integer({ min: -60, max: 59 }) },
        ),
      )
      .map(([tr, delta]) => {
        const local = new Date(tr.at + tr.from + delta * MINUTE);
        return { tr, hour: local.getUTCHours(), minute: local.getUTCMinutes() };
      });

  /** A transition and an expression, half the time one mostly at a local time near the change. */
  const anyOrNear = (seconds: boolean, minutes: number): fc.Arbitrary<[Transition, Spec]> =>
    fc.oneof(
      fc.tuple(transition, spec(seconds)),
      nearTransition(minutes).chain(({ tr, hour, minute }) => fc.tuple(fc.constant(tr), spec(seconds, { hour, minute }))),
    );

  it("5 fields, mostly at a local time near the change: the whole sequence over three days", () => {
    fc.assert(
      fc.property(
        nearTransition(90).chain(({ tr, hour, minute }) => fc.tuple(fc.constant(tr), spec(false, { hour, minute }))),
        ([tr, s]) => {
          const w = minuteWindow(tr);
          expect(labels(w.zone, implementationFires(s.expr, w)), `${s.expr} in ${w.zone}`).toEqual(labels(w.zone, referenceFires(s, w)));
        },
      ),
      { numRuns: 200 },
    );
  });

  it("6 fields, mostly at a local time near the change: the whole sequence over two hours", () => {
    fc.assert(
      fc.property(
        nearTransition(50).chain(({ tr, hour, minute }) => fc.tuple(fc.constant(tr), spec(true, { hour, minute }))),
        ([tr, s]) => {
          const w = secondWindow(tr);
          expect(labels(w.zone, implementationFires(s.expr, w)), `${s.expr} in ${w.zone}`).toEqual(labels(w.zone, referenceFires(s, w)));
        },
      ),
      { numRuns: 200 },
    );
  });

  it("5 fields: the whole sequence over three days", () => {
    fc.assert(
      fc.property(transition, spec(false), (tr, s) => {
        const w = minuteWindow(tr);
        expect(labels(w.zone, implementationFires(s.expr, w)), `${s.expr} in ${w.zone}`).toEqual(labels(w.zone, referenceFires(s, w)));
      }),
      { numRuns: 250 },
    );
  });

  it("6 fields: the whole sequence over two hours, second by second", () => {
    fc.assert(
      fc.property(transition, spec(true), (tr, s) => {
        const w = secondWindow(tr);
        expect(labels(w.zone, implementationFires(s.expr, w)), `${s.expr} in ${w.zone}`).toEqual(labels(w.zone, referenceFires(s, w)));
      }),
      { numRuns: 200 },
    );
  });

  it("macros, around every transition", () => {
    for (const tr of ALL) {
      for (const s of MACROS) {
        // @minutely only over two hours (it is `* * * * *`, walked below).
        const w = s.expr === "@minutely" ? window(tr, HOUR, HOUR, MINUTE) : minuteWindow(tr);
        expect(labels(w.zone, implementationFires(s.expr, w)), `${s.expr} in ${w.zone}`).toEqual(labels(w.zone, referenceFires(s, w)));
      }
    }
  });

  it("from any instant, to the millisecond: the first reference fire strictly after it", () => {
    fc.assert(
      fc.property(
        anyOrNear(false, 90),
        fc.oneof(fc.integer({ min: 0, max: 72 * HOUR - 1 }), fc.integer({ min: 34 * HOUR, max: 38 * HOUR })),
        ([tr, s], into) => {
          const w = minuteWindow(tr);
          const after = w.start + into;
          const expected = referenceFires(s, w).find((t) => t > after);
          const next = nextCronFire(s.expr, w.zone, after);
          if (expected !== undefined)
            expect(next === null ? null : label(w.zone, next), `${s.expr} in ${w.zone}`).toBe(label(w.zone, expected));
          else expect(next === null || next >= w.end).toBe(true);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("6 fields, from any instant, to the millisecond: the first reference fire strictly after it", () => {
    fc.assert(
      fc.property(anyOrNear(true, 50), fc.integer({ min: 0, max: 2 * HOUR - 1 }), ([tr, s], into) => {
        const w = secondWindow(tr);
        const after = w.start + into;
        const expected = referenceFires(s, w).find((t) => t > after);
        const next = nextCronFire(s.expr, w.zone, after);
        if (expected !== undefined)
          expect(next === null ? null : label(w.zone, next), `${s.expr} in ${w.zone}`).toBe(label(w.zone, expected));
        else expect(next === null || next >= w.end).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it("every minute (`* * * * *`) for four hours around each transition", () => {
    const every: Spec = { expr: "* * * * *", ...plain("0 * * * * *") };
    for (const tr of ALL) {
      const w = window(tr, 2 * HOUR, 2 * HOUR, MINUTE);
      expect(labels(w.zone, implementationFires(every.expr, w))).toEqual(labels(w.zone, referenceFires(every, w)));
    }
  });
});

describe("still", () => {
  it("hashed fields (`H`) are the same on every evaluation, so the schedule does not wander", () => {
    expect(cronError("H H * * *", "Europe/Berlin")).toBeNull();
    const after = T("2026-01-01T00:00:00Z");
    const first = nextCronFire("H H * * *", "Europe/Berlin", after);
    for (let i = 0; i < 5; i++) expect(nextCronFire("H H * * *", "Europe/Berlin", after)).toBe(first);
  });

  it("an expression that can never match is rejected before it gets here", () => {
    expect(cronError("0 0 30 2 *", "Europe/Berlin")).toContain("invalid cron expression");
  });

  it("leap days, far ahead, in a zone", () => {
    expect(label("Europe/Berlin", nextCronFire("0 12 29 2 *", "Europe/Berlin", T("2025-01-01T00:00:00Z"))!)).toBe(
      "2028-02-29T11:00:00Z (12:00:00 +01:00)",
    );
  });
});
