import { CronDate, type CronExpression, CronExpressionParser } from "cron-parser";

/** cron-parser also accepts 4 or 7 fields; the API promises 5 (minute first) or 6 (second first). */
const FIELD_COUNTS = new Set([5, 6]);

const DAY = 86_400_000;

/**
 * cron-parser, always with a fixed hash seed: without one, `H` ("hashed") fields take a new random
 * value on every parse, so the same job would fire at a different minute each time it is evaluated.
 */
function parse(expression: string, options: { tz: string; currentDate: Date | number }) {
  return CronExpressionParser.parse(expression, { ...options, hashSeed: expression });
}

/**
 * Expressions parsed over wall-clock times, by text: every fire of a cron job works out its next
 * fire, and parsing the expression each time showed in the alarm's CPU profile (bench --profile,
 * steady workload). Each is reset before use, and `nextCronFire` never yields while using one.
 * Bounded; the first key is the oldest.
 */
const wallClocks = new Map<string, CronExpression>();
const WALL_CLOCKS_KEPT = 1_000;

function wallClockOf(expression: string): CronExpression {
  let walls = wallClocks.get(expression);
  if (!walls) {
    walls = parse(expression, { tz: "UTC", currentDate: 0 });
    if (wallClocks.size >= WALL_CLOCKS_KEPT) wallClocks.delete(wallClocks.keys().next().value!);
    wallClocks.set(expression, walls);
  }
  return walls;
}

/** The zone's offset from UTC at instant `t`, in ms (+01:00 is 3,600,000). */
export function utcOffsetMs(t: number, timezone: string): number {
  if (timezone === "UTC") return 0; // most jobs' zone, without a trip through Luxon
  return Math.round(new CronDate(t, timezone).getUTCOffset() * 60_000);
}

/** Why a cron expression is unusable, or null when it is fine. */
export function cronError(expression: string, timezone = "UTC"): string | null {
  const trimmed = expression.trim();
  if (!trimmed.startsWith("@") && !FIELD_COUNTS.has(trimmed.split(/\s+/).length)) {
    return "a cron expression has 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first)";
  }
  try {
    parse(trimmed, { tz: timezone, currentDate: 0 }).next();
    return null;
  } catch (err) {
    return `invalid cron expression: ${(err as Error).message}`;
  }
}

/** True when the runtime knows this IANA zone. */
export function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

/**
 * The first instant strictly after `afterMs` at which the job fires, or null when it never does.
 *
 * A job fires at every instant whose wall-clock time in `timezone` matches, with two exceptions
 * for a fixed local time (hour, minute and second each a single value, e.g. `30 2 * * *`, `@daily`):
 * - when a spring-forward change skips it, it fires once, at the first instant after the gap
 *   (03:00 for 02:30 on a 02:00→03:00 night);
 * - when a fall-back change repeats it, it fires once, at its first occurrence.
 * Other jobs (a wildcard, step, list or range of several values in any of those fields: every 15
 * minutes, every 2 hours, `15,45 2 * * *`) fire at both passes through a repeated hour and have
 * no skipped times.
 *
 * Why not cron-parser's own `tz` option: its DST handling is wrong in several ways (skipped fixed
 * times fire one gap-length late, e.g. 03:30 for 02:30, or not at all with Lord Howe's 30-minute
 * gap; non-fixed jobs fire at the landing hour too; repeated hours are dropped or fired once
 * inconsistently; `@hourly` in Australia/Lord_Howe throws "loop limit exceeded" on the night the
 * clock falls back; `next()` can return an instant before the start). So cron-parser only does
 * what it gets right, the calendar: it runs in UTC over *wall-clock* times (a wall-clock time is
 * written as the UTC instant with the same fields), and the mapping from wall-clock times to real
 * instants in the zone is done here, with offsets from cron-parser's CronDate (Luxon, Intl).
 *
 * Assumes a zone changes offset at most once within any two days, as the Temporal polyfill does.
 */
export function nextCronFire(expression: string, timezone: string, afterMs: number): number | null {
  const offsets = new Map<number, number>(); // the same instants come up repeatedly below
  const offset = (t: number) => {
    let ms = offsets.get(t);
    if (ms === undefined) {
      ms = utcOffsetMs(t, timezone);
      offsets.set(t, ms);
    }
    return ms;
  };

  const walls = wallClockOf(expression.trim());
  const { second, minute, hour } = walls.fields;
  const fixed = second.values.length === 1 && minute.values.length === 1 && hour.values.length === 1;
  /** Matching wall-clock times from `wall` on (cron-parser is exclusive of a whole-second start). */
  const matchesFrom = (wall: number) => walls.reset(new Date(wall - 1000));
  const nextMatch = () => {
    try {
      return walls.next().getTime();
    } catch {
      return null; // cron-parser found no further match within its loop limit
    }
  };

  let best: number | null = null;
  let bound = Infinity; // wall-clock times from here on cannot show at an instant before `best`
  const consider = (t: number) => {
    if (t <= afterMs || (best !== null && t >= best)) return;
    best = t;
    // An instant after afterMs but before `best` shows a later wall-clock time than `best` only
    // if the clock falls back (by `rise`) in between; then this is the highest it shows.
    const rise = Math.max(0, offset(best - DAY) - offset(best));
    bound = best + offset(Math.max(afterMs, best - rise));
  };

  // afterMs may lie in the first pass through an hour that the clock is about to repeat (it falls
  // back by `drop` within `drop`). The wall-clock times from the landing of that fall back up to
  // afterMs's own then come again after it, unseen by the walk below, which starts at afterMs's
  // own; the first that matches is the earliest. (A fixed local time has no second pass.)
  const now = offset(afterMs);
  const drop = now - offset(afterMs + DAY);
  if (!fixed && drop > 0 && offset(afterMs + drop) !== now) {
    const fallBack = firstInstant(afterMs, afterMs + drop, (t) => offset(t) !== now);
    matchesFrom(fallBack + offset(fallBack));
    const wall = nextMatch();
    if (wall !== null && wall < afterMs + now) consider(wall - offset(fallBack));
  }

  matchesFrom(afterMs + now);
  for (let wall = nextMatch(); wall !== null && wall < bound; wall = nextMatch()) {
    // The instants showing `wall`: with the offsets a day either side, none (a gap), one or two
    // (a repeat, earlier first).
    const before = offset(wall - DAY);
    const after = offset(wall + DAY);
    const instants = before === after ? [wall - before] : [wall - before, wall - after].filter((t) => t + offset(t) === wall);
    // A fixed local time skipped by a gap fires when the gap ends; repeated, on its first pass only.
    if (instants.length === 0 && fixed) instants.push(firstInstant(wall - after, wall - before, (t) => t + offset(t) > wall));
    for (const t of fixed ? instants.slice(0, 1) : instants) consider(t);
  }
  return best;
}

/** The first instant in (lo, hi] where `test`, which turns true once in that range and stays so, holds. */
function firstInstant(lo: number, hi: number, test: (t: number) => boolean): number {
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (test(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}
