import { describe, expect, it } from "vitest";
import { layers } from "../../dashboard/lib/graph-layout.ts";
import { EMPTY_FORM, toCreateJob } from "../../dashboard/lib/job-form.ts";
import { failuresOverTime, fireLag, niceBucket } from "../../dashboard/lib/series.ts";
import { formatOffset, offsetMinutes, zoned } from "../../dashboard/lib/zone.ts";
import type { Run } from "../../src/client/index.ts";

/** The dashboard's pure parts, without a browser: zones and clock changes, chart series, the job form. */

describe("zoned instants", () => {
  it("reads a zone's offset, half hours and west of UTC included", () => {
    expect(offsetMinutes(new Date("2027-01-15T12:00:00Z"), "Europe/Berlin")).toBe(60);
    expect(offsetMinutes(new Date("2027-07-15T12:00:00Z"), "Europe/Berlin")).toBe(120);
    expect(offsetMinutes(new Date("2027-01-15T12:00:00Z"), "Asia/Kolkata")).toBe(330);
    expect(offsetMinutes(new Date("2027-01-15T12:00:00Z"), "America/New_York")).toBe(-300);
    expect(offsetMinutes(new Date("2027-01-15T12:00:00Z"), "UTC")).toBe(0);
    expect([formatOffset(330), formatOffset(-300), formatOffset(0)]).toEqual(["UTC+5:30", "UTC−5", "UTC+0"]);
  });

  it("marks the first instant after each clock change, forward and back", () => {
    const instants = [
      "2027-03-27T01:30:00Z",
      "2027-03-28T01:00:00Z",
      "2027-03-29T00:30:00Z",
      "2027-10-31T00:30:00Z",
      "2027-11-01T01:30:00Z",
    ];
    const rows = zoned(instants, "Europe/Berlin");
    expect(rows.map((r) => r.clockChange)).toEqual([null, "clocks go forward: UTC+1 → UTC+2", null, null, "clocks go back: UTC+2 → UTC+1"]);
    expect(rows[1]!.local).toContain("03:00:00");
    expect(rows[0]!.local).toContain("02:30:00");
  });

  it("compares the first instant with the instant the list starts from", () => {
    const rows = zoned(["2027-04-01T00:30:00Z"], "Europe/Berlin", new Date("2027-03-01T00:00:00Z"));
    expect(rows[0]!.clockChange).toBe("clocks go forward: UTC+1 → UTC+2");
  });
});

function run(overrides: Partial<Run>): Run {
  return {
    id: "run_x",
    jobId: "job_x",
    jobVersion: 1,
    trigger: "schedule",
    scheduledAt: "2027-01-01T00:00:00.000Z",
    catchUp: false,
    state: "succeeded",
    attempts: 1,
    startedAt: null,
    finishedAt: null,
    status: 200,
    error: null,
    result: null,
    ...overrides,
  };
}

describe("chart series", () => {
  it("fire lag: started runs only, oldest first, never negative", () => {
    const points = fireLag([
      run({ id: "b", scheduledAt: "2027-01-01T00:01:00Z", startedAt: "2027-01-01T00:01:00.250Z" }),
      run({ id: "a", scheduledAt: "2027-01-01T00:00:00Z", startedAt: "2027-01-01T00:00:00.040Z" }),
      run({ id: "c", scheduledAt: "2027-01-01T00:02:00Z", startedAt: null, state: "queued" }),
      run({ id: "d", scheduledAt: "2027-01-01T00:03:00Z", startedAt: "2027-01-01T00:02:59.990Z" }),
    ]);
    expect(points.map((p) => [p.runId, p.lagMs])).toEqual([
      ["a", 40],
      ["b", 250],
      ["d", 0],
    ]);
  });

  it("failures over time: finished runs per round bucket, failed and dead counted as failed", () => {
    const runs = [
      run({ scheduledAt: "2027-01-01T00:00:10Z", state: "succeeded" }),
      run({ scheduledAt: "2027-01-01T00:00:50Z", state: "failed" }),
      run({ scheduledAt: "2027-01-01T00:05:00Z", state: "dead" }),
      run({ scheduledAt: "2027-01-01T00:05:30Z", state: "queued" }),
      run({ scheduledAt: "2027-01-01T00:10:00Z", state: "succeeded" }),
    ];
    const buckets = failuresOverTime(runs, 4);
    expect(niceBucket((10 * 60_000 - 10_000) / 4)).toBe(300_000);
    expect(buckets.map((b) => [new Date(b.start).toISOString().slice(11, 19), b.finished, b.failed])).toEqual([
      ["00:00:00", 2, 1],
      ["00:05:00", 1, 1],
      ["00:10:00", 1, 0],
    ]);
    expect(failuresOverTime([run({ state: "running" })])).toEqual([]);
  });
});

describe("the new-job form", () => {
  it("sends a cron with its zone, a JSON body as JSON and other text as text", () => {
    const job = toCreateJob({
      ...EMPTY_FORM,
      name: " nightly ",
      value: "0 3 * * *",
      timezone: "Europe/Berlin",
      url: "https://example.com/x",
      body: '{"a":1}',
    });
    expect(job).toEqual({
      name: "nightly",
      schedule: { cron: "0 3 * * *", timezone: "Europe/Berlin" },
      target: { url: "https://example.com/x", method: "POST", body: { a: 1 } },
      retry: { maxAttempts: 3 },
    });
    expect(toCreateJob({ ...EMPTY_FORM, kind: "every", value: "5m", url: "https://example.com/x", body: "plain" }).target!.body).toBe(
      "plain",
    );
    expect(toCreateJob({ ...EMPTY_FORM, kind: "every", value: "5m", url: "https://example.com/x" }).schedule).toEqual({ every: "5m" });
  });
});

describe("the workflow graph's columns", () => {
  it("puts each step right of every step it runs after, in as few columns as the longest chain", () => {
    const steps = [
      { id: "load", after: ["transform", "validate"] },
      { id: "extract" },
      { id: "transform", after: ["extract"] },
      { id: "validate", after: ["extract"] },
      { id: "alert", after: ["load"], when: "any_failed" as const },
      { id: "audit" },
    ];
    expect(layers(steps).map((column) => column.map((s) => s.id))).toEqual([
      ["extract", "audit"],
      ["transform", "validate"],
      ["load"],
      ["alert"],
    ]);
  });
});
