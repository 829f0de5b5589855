import { describe, expect, it } from "vitest";
import {
  ATTEMPT_OUTCOMES,
  ATTEMPT_TRANSITIONS,
  type AttemptEvent,
  type AttemptOutcome,
  attemptTransition,
  FINAL_ATTEMPT_OUTCOMES,
  LATE_NOTED_OUTCOMES,
  LIVE_ATTEMPT_OUTCOMES,
} from "../../src/model/attempt-states";

const EVENTS: AttemptEvent[] = ["accept", "succeed", "fail", "time_out", "cancel"];
const sorted = (outcomes: Iterable<AttemptOutcome>) => [...new Set(outcomes)].sort();

describe("the attempt state table", () => {
  it("allows exactly the attempt lifecycle's transitions", () => {
    const allowed = ATTEMPT_OUTCOMES.flatMap((from) =>
      EVENTS.flatMap((e) => (attemptTransition(from, e) ? [`${from} --${e}--> ${attemptTransition(from, e)}`] : [])),
    );
    expect(allowed.sort()).toEqual(
      [
        "running --accept--> accepted",
        "running --succeed--> succeeded",
        "running --fail--> failed",
        "running --time_out--> timed_out",
        "running --cancel--> cancelled",
        "accepted --succeed--> succeeded",
        "accepted --fail--> failed",
        "accepted --time_out--> timed_out",
        "accepted --cancel--> cancelled",
      ].sort(),
    );
  });

  it("refuses what the table lacks: an ended attempt never changes, and a 202 is taken once", () => {
    for (const from of FINAL_ATTEMPT_OUTCOMES) for (const e of EVENTS) expect(attemptTransition(from, e)).toBeNull();
    expect(attemptTransition("accepted", "accept")).toBeNull();
  });

  it("every outcome is reachable from running, where every attempt starts", () => {
    const seen = new Set<AttemptOutcome>(["running"]);
    for (let grew = true; grew; ) {
      grew = false;
      for (const from of [...seen])
        for (const to of Object.values(ATTEMPT_TRANSITIONS[from]))
          if (!seen.has(to)) {
            seen.add(to);
            grew = true;
          }
    }
    expect(sorted(seen)).toEqual(sorted(ATTEMPT_OUTCOMES));
  });
});

describe("the named groups of attempt outcomes", () => {
  it("live and final split the outcomes, and live ones are exactly those with a way out", () => {
    expect([...LIVE_ATTEMPT_OUTCOMES, ...FINAL_ATTEMPT_OUTCOMES].length).toBe(ATTEMPT_OUTCOMES.length);
    expect(sorted([...LIVE_ATTEMPT_OUTCOMES, ...FINAL_ATTEMPT_OUTCOMES])).toEqual(sorted(ATTEMPT_OUTCOMES));
    expect(sorted(LIVE_ATTEMPT_OUTCOMES)).toEqual(sorted(ATTEMPT_OUTCOMES.filter((o) => Object.keys(ATTEMPT_TRANSITIONS[o]).length > 0)));
  });

  it("late answers are kept only for attempts the shard ended, not for outcomes the target already reported", () => {
    expect(sorted(LATE_NOTED_OUTCOMES)).toEqual(sorted(["timed_out", "cancelled"]));
    for (const o of LATE_NOTED_OUTCOMES) expect(FINAL_ATTEMPT_OUTCOMES).toContain(o);
    const reportedByTarget = LIVE_ATTEMPT_OUTCOMES.flatMap((o) => [attemptTransition(o, "succeed"), attemptTransition(o, "fail")]);
    for (const o of reportedByTarget) expect(LATE_NOTED_OUTCOMES).not.toContain(o);
  });
});
