import { describe, expect, it } from "vitest";
import {
  AWAITING_ADMISSION_STATES,
  afterFailure,
  BUFFERED_STATES,
  classifyStatus,
  DEAD_LETTER_STATES,
  FINAL_STATES,
  IN_FLIGHT_STATES,
  INITIAL_STATES,
  LEASED_STATES,
  PENDING_STATES,
  RUN_STATE_SQL_LIST,
  RUN_STATES,
  type RunEvent,
  type RunState,
  sqlList,
  TRANSITIONS,
  transition,
  UNFINISHED_STATES,
} from "../../src/model/run-states";
import { retryDelay } from "../../src/schedule/backoff";

const EVENTS: RunEvent[] = [
  "dispatch",
  "succeed",
  "retry",
  "exhaust",
  "reject",
  "requeue",
  "redispatch",
  "cancel",
  "abandon",
  "revive",
  "start",
  "hold",
  "admit",
  "begin_steps",
];

describe("the run state table", () => {
  it("allows exactly the lifecycle's transitions", () => {
    const allowed = RUN_STATES.flatMap((from) =>
      EVENTS.flatMap((e) => (transition(from, e) ? [`${from} --${e}--> ${transition(from, e)}`] : [])),
    );
    expect(allowed.sort()).toEqual(
      [
        "queued --dispatch--> running",
        "queued --begin_steps--> running",
        "queued --cancel--> cancelled",
        "dead --revive--> queued",
        "buffered --start--> queued",
        "buffered --cancel--> cancelled",
        "failed --revive--> queued",
        "running --succeed--> succeeded",
        "running --retry--> retry_wait",
        "running --exhaust--> dead",
        "running --reject--> failed",
        "running --cancel--> cancelled",
        "running --redispatch--> running",
        "running --abandon--> running",
        "running --hold--> waiting",
        "retry_wait --requeue--> queued",
        "retry_wait --cancel--> cancelled",
        "retry_wait --hold--> waiting",
        "buffered --hold--> waiting",
        "dead --hold--> waiting",
        "failed --hold--> waiting",
        "waiting --admit--> queued",
        "waiting --cancel--> cancelled",
      ].sort(),
    );
  });

  it("final states have no way out but a person's retry of a dead letter", () => {
    expect([...FINAL_STATES].sort()).toEqual(["cancelled", "dead", "failed", "skipped", "succeeded"]);
    for (const s of FINAL_STATES)
      for (const e of EVENTS) {
        const revived = { revive: "queued", hold: "waiting" }[e as string];
        const expected = DEAD_LETTER_STATES.includes(s) && revived ? revived : null;
        expect(transition(s, e)).toBe(expected);
      }
  });

  it("every state is reachable from a state runs are born in (queued; waiting by flow control; buffered and skipped by overlap policies)", () => {
    const seen = new Set<string>(INITIAL_STATES);
    for (let grew = true; grew; ) {
      grew = false;
      for (const from of [...seen])
        for (const to of Object.values(TRANSITIONS[from as keyof typeof TRANSITIONS])) {
          if (seen.has(to!)) continue;
          seen.add(to!);
          grew = true;
        }
    }
    expect([...seen].sort()).toEqual([...RUN_STATES].sort());
  });
});

describe("the named groups of run states", () => {
  const GROUPS = {
    INITIAL_STATES,
    FINAL_STATES,
    DEAD_LETTER_STATES,
    UNFINISHED_STATES,
    PENDING_STATES,
    IN_FLIGHT_STATES,
    AWAITING_ADMISSION_STATES,
    LEASED_STATES,
    BUFFERED_STATES,
  };
  const sorted = (states: Iterable<RunState>) => [...new Set(states)].sort();
  /** The states the table lets `event` leave. */
  const leaving = (event: RunEvent) => sorted(RUN_STATES.filter((s) => transition(s, event) !== null));

  it.each(Object.entries(GROUPS))("%s is a non-empty set of known states", (_, group) => {
    expect(group.length).toBeGreaterThan(0);
    expect(new Set(group).size).toBe(group.length);
    for (const s of group) expect(RUN_STATES).toContain(s);
  });

  it("every run is unfinished, buffered or final, and only one of them", () => {
    const parts = [UNFINISHED_STATES, BUFFERED_STATES, FINAL_STATES].flat();
    expect(parts.length).toBe(RUN_STATES.length);
    expect(sorted(parts)).toEqual(sorted(RUN_STATES));
  });

  it("a pause or delete can cancel exactly the runs that have not ended", () => {
    expect(leaving("cancel")).toEqual(sorted([...UNFINISHED_STATES, ...BUFFERED_STATES]));
  });

  it("pending runs are the unfinished and buffered ones with no attempt under way", () => {
    expect(sorted(PENDING_STATES)).toEqual(sorted([...UNFINISHED_STATES, ...BUFFERED_STATES].filter((s) => !LEASED_STATES.includes(s))));
  });

  it("in flight means dispatched or leased, and never ended", () => {
    // queued is in flight for the instant between a run's admission and its dispatch, in one write.
    expect(sorted(IN_FLIGHT_STATES)).toEqual(sorted([...leaving("dispatch"), ...LEASED_STATES]));
    for (const s of IN_FLIGHT_STATES) expect(UNFINISHED_STATES).toContain(s);
  });

  it("each single-purpose group is where its event starts", () => {
    expect(sorted(AWAITING_ADMISSION_STATES)).toEqual(leaving("admit"));
    expect(sorted(BUFFERED_STATES)).toEqual(leaving("start"));
    expect(sorted(DEAD_LETTER_STATES)).toEqual(leaving("revive"));
    expect(sorted(LEASED_STATES)).toEqual(sorted(leaving("dispatch").map((s) => transition(s, "dispatch")!)));
    // A lease that ends with no outcome sends the attempt again under the same fence: the run stays leased.
    expect(leaving("redispatch").map((s) => transition(s, "redispatch"))).toEqual(LEASED_STATES);
  });

  it("a run is born before its first attempt, and born final only when skipped", () => {
    expect(INITIAL_STATES.filter((s) => LEASED_STATES.includes(s))).toEqual([]);
    expect(INITIAL_STATES.filter((s) => FINAL_STATES.includes(s))).toEqual(["skipped"]);
  });
});

describe("sqlList", () => {
  it("renders a group as the body of a SQL IN list", () => {
    expect(sqlList(DEAD_LETTER_STATES)).toBe("'dead', 'failed'");
    expect(sqlList(["waiting"])).toBe("'waiting'");
  });

  it("keeps the CHECK list storage already holds, byte for byte (an upgrade compares it)", () => {
    expect(RUN_STATE_SQL_LIST).toBe(
      "'waiting', 'queued', 'running', 'retry_wait', 'buffered', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped'",
    );
  });

  it("refuses what would not be valid or safe SQL", () => {
    expect(() => sqlList([])).toThrow();
    expect(() => sqlList(["dead') OR ('1" as RunState])).toThrow();
  });
});

describe("retry or give up", () => {
  it.each([
    [null, "retryable"],
    [500, "retryable"],
    [503, "retryable"],
    [408, "retryable"],
    [429, "retryable"],
    [400, "permanent"],
    [401, "permanent"],
    [404, "permanent"],
    [422, "permanent"],
  ] as const)("status %s is %s", (status, kind) => expect(classifyStatus(status)).toBe(kind));

  it("a 4xx the job lists is retried", () => {
    expect(classifyStatus(409, [409, 423])).toBe("retryable");
    expect(classifyStatus(404, [409])).toBe("permanent");
  });

  it.each([
    ["retryable", 1, 3, "retry"],
    ["retryable", 2, 3, "retry"],
    ["retryable", 3, 3, "exhaust"],
    ["retryable", 1, 1, "exhaust"],
    ["permanent", 1, 3, "reject"],
  ] as const)("%s failure of attempt %i of %i → %s", (kind, attempt, max, decision) => {
    expect(afterFailure(kind, attempt, max)).toBe(decision);
  });
});

describe("backoff", () => {
  it("full jitter: uniform in [0, min(max, initial·factor^(n-2))]", () => {
    const policy = { initialMs: 1_000, maxMs: 10_000, factor: 2 };
    expect(retryDelay(2, policy, "full", () => 0.999999)).toBe(1_000);
    expect(retryDelay(3, policy, "full", () => 0.999999)).toBe(2_000);
    expect(retryDelay(4, policy, "full", () => 0.999999)).toBe(4_000);
    expect(retryDelay(10, policy, "full", () => 0.999999)).toBe(10_000);
    expect(retryDelay(5, policy, "full", () => 0)).toBe(0);
    expect(retryDelay(3, policy, "full", () => 0.5)).toBe(1_000);
  });

  it("without jitter the delay is the cap itself", () => {
    const policy = { initialMs: 500, maxMs: 3_000, factor: 3 };
    expect([2, 3, 4, 5].map((n) => retryDelay(n, policy, "none", () => 0))).toEqual([500, 1_500, 3_000, 3_000]);
  });

  it("full jitter spreads a herd: delays of simultaneous failures are not all alike", () => {
    const delays = new Set(Array.from({ length: 50 }, () => retryDelay(4)));
    expect(delays.size).toBeGreaterThan(40);
    for (const d of delays) {
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThanOrEqual(4_000);
    }
  });
});
