import { describe, expect, it } from "vitest";
import {
  ALARM_LAG_BOUNDS_MS,
  ALARM_LAG_COLUMNS,
  addLags,
  countLag,
  lagColumnValues,
  lagsOfValues,
  noLags,
} from "../../src/protocol/alarm-lag";
import { ArmedAlarm } from "../../src/shard/armed-alarm";
import { SHARD_MIGRATIONS } from "../../src/shard/migrations";

describe("alarm lag counts", () => {
  it("a lag goes to the first bucket whose bound it does not pass; past the last, to the one above", () => {
    const lags = noLags();
    expect(lags.counts).toHaveLength(ALARM_LAG_BOUNDS_MS.length + 1);
    for (const ms of [0, 10, 11, 25, 300_000, 300_001]) countLag(lags, ms);
    expect(lags.counts[0]).toBe(2); // 0 and 10
    expect(lags.counts[1]).toBe(2); // 11 and 25
    expect(lags.counts[ALARM_LAG_BOUNDS_MS.length - 1]).toBe(1); // 300,000
    expect(lags.counts[ALARM_LAG_BOUNDS_MS.length]).toBe(1); // above every bound
    expect(lags.counts.reduce((n, c) => n + c, 0)).toBe(6);
    expect(lags.sumMs).toBe(0 + 10 + 11 + 25 + 300_000 + 300_001);
  });

  it("add up bucket by bucket, as minutes and shards do", () => {
    const a = noLags();
    const b = noLags();
    countLag(a, 7);
    countLag(b, 7);
    countLag(b, 4_000);
    addLags(a, b);
    expect(a.counts[0]).toBe(2);
    expect(a.counts[ALARM_LAG_BOUNDS_MS.indexOf(5_000)]).toBe(1);
    expect(a.sumMs).toBe(4_014);
  });

  it("round-trip through the meter's tally, whose order is that of the columns shard schema step 10 created and step 18 read, every one", () => {
    const lags = noLags();
    countLag(lags, 30);
    countLag(lags, 999_999);
    const values = lagColumnValues(lags);
    expect(values).toHaveLength(ALARM_LAG_COLUMNS.length);
    expect(lagsOfValues(values)).toEqual(lags);
    expect(lagsOfValues([])).toEqual(noLags());
    const step = SHARD_MIGRATIONS.find((m) => m.version === 10)!;
    for (const column of ALARM_LAG_COLUMNS) expect(step.sql).toContain(`ADD COLUMN ${column} INTEGER NOT NULL DEFAULT 0;`);
    // Step 18 makes the old columns a tally's lags, in this order.
    const conversion = SHARD_MIGRATIONS.find((m) => m.version === 18)!.sql.replace(/\s+/g, " ");
    expect(conversion).toContain(`'lags', json_array( ${ALARM_LAG_COLUMNS.map((c) => `SUM(${c})`).join(", ")}))`);
    // Bounds in the names: a change of bounds must come with a step that makes its columns.
    expect(ALARM_LAG_COLUMNS.slice(0, ALARM_LAG_BOUNDS_MS.length)).toEqual(ALARM_LAG_BOUNDS_MS.map((ms) => `alarm_lag_le_${ms}ms`));
  });
});

describe("ArmedAlarm", () => {
  it("an alarm set for later is late by the time past it", () => {
    const alarm = new ArmedAlarm();
    alarm.set(1_000, 500);
    expect(alarm.started(1_040, 1_000)).toBe(40);
  });

  it("an alarm set for a time already past is late only from when it was set", () => {
    const alarm = new ArmedAlarm();
    alarm.set(1_000, 5_000);
    expect(alarm.started(5_030, 1_000)).toBe(30);
  });

  it("set again for the same time, it keeps the moment it was first set", () => {
    const alarm = new ArmedAlarm();
    alarm.set(1_000, 2_000);
    alarm.set(1_000, 4_000);
    expect(alarm.started(4_500, 1_000)).toBe(2_500);
  });

  it("an alarm it did not set (a new object after an eviction, or another writer): from the runtime's time", () => {
    expect(new ArmedAlarm().started(9_000, 8_000)).toBe(1_000);
    const alarm = new ArmedAlarm();
    alarm.set(20_000, 0);
    expect(alarm.started(9_000, 8_000)).toBe(1_000);
  });

  it("without the runtime's time (alarm() called by a test): its own time if it has come, else unknown", () => {
    const alarm = new ArmedAlarm();
    alarm.set(1_000, 0);
    expect(alarm.started(1_200, undefined)).toBe(200);
    alarm.set(5_000, 1_200);
    expect(alarm.started(1_300, undefined)).toBeNull();
    expect(new ArmedAlarm().started(1_300, undefined)).toBeNull();
  });

  it("a running alarm is no longer set: a second start knows nothing of it", () => {
    const alarm = new ArmedAlarm();
    alarm.set(1_000, 0);
    expect(alarm.started(1_010, undefined)).toBe(10);
    expect(alarm.started(1_020, undefined)).toBeNull();
  });
});
