import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  BASE_COOLDOWN_MS,
  type Breaker,
  callerOf,
  check,
  closedBreaker,
  FAILURE_WINDOW_MS,
  FAILURES_PER_CALLER,
  FAILURES_TO_OPEN,
  MAX_COOLDOWN_MS,
  MAX_HOLD_MS,
  originHealth,
  PROBE_LEASE_MS,
  PROBE_TURN_MS,
  record,
  storedBreaker,
} from "../../src/gate/breaker";

const ORIGIN = "https://api.example.com";
/** `n` failures, taken in turn from `callers` (one a millisecond from `from`). */
const failTimes = (n: number, callers = ["a", "b"], from = 0) => {
  let b = closedBreaker(ORIGIN);
  for (let i = 0; i < n; i++) b = record(b, false, from + i, callers[i % callers.length]!);
  return b;
};

describe("circuit breaker", () => {
  it("opens after N failures in a row of several callers, not before, and an answer of the origin in between starts the count again", () => {
    expect(failTimes(FAILURES_TO_OPEN - 1).state).toBe("closed");
    expect(failTimes(FAILURES_TO_OPEN)).toMatchObject({ state: "open", retryAt: FAILURES_TO_OPEN - 1 + BASE_COOLDOWN_MS, downSince: 4 });
    const interrupted = record(record(failTimes(FAILURES_TO_OPEN - 1), true, 10, "c"), false, 11, "a");
    expect(interrupted).toMatchObject({ state: "closed", failures: 1, callers: { a: 1 } });
  });

  it("one caller alone never opens it, however often it fails; it opens once another fails too, counting at most its share", () => {
    const alone = failTimes(1_000, ["only"]);
    expect(alone).toMatchObject({ state: "closed", failures: 1_000, callers: { only: FAILURES_PER_CALLER } });
    // A neighbour's one timeout after that is not enough: 3 + 1 < 5.
    const blip = record(alone, false, 2_000, "other");
    expect(blip.state).toBe("closed");
    expect(record(blip, false, 2_001, "other").state).toBe("open");
  });

  it("one origin's mix of endpoints (503, 503, then 200; always 500; 404; one timeout) never opens it", () => {
    const outcomes: Array<[string, number | null]> = [
      ["flaky", 503],
      ["broken", 500],
      ["missing", 404],
      ["slow", null],
      ["flaky", 503],
      ["broken", 500],
      ["broken", 500],
      ["missing", 404],
      ["broken", 500],
      ["broken", 500],
      ["flaky", 200],
      ["slow", 200],
    ];
    let b = closedBreaker(ORIGIN);
    outcomes.forEach(([caller, status], i) => {
      b = record(b, originHealth(status, false), i, caller);
      expect(b.state).toBe("closed");
    });
  });

  it("failures further apart than the window do not add up", () => {
    let b = failTimes(FAILURES_TO_OPEN - 1);
    b = record(b, false, FAILURE_WINDOW_MS + 1_000, "c");
    expect(b).toMatchObject({ state: "closed", failures: 1, callers: { c: 1 } });
  });

  it("open: runs wait until retryAt; then one probe goes and the rest wait for it", () => {
    const open = failTimes(FAILURES_TO_OPEN);
    const early = check(open, ["a", "b", "c"], open.retryAt! - 1);
    expect(early).toMatchObject({ pass: [], waitUntil: open.retryAt, giveUp: false, breaker: { state: "open", held: 3 } });
    const probe = check(early.breaker, ["a", "b", "c"], open.retryAt!);
    expect(probe).toMatchObject({ pass: [0], waitUntil: open.retryAt! + PROBE_LEASE_MS, breaker: { state: "half_open" } });
    expect(check(probe.breaker, ["b"], open.retryAt! + 1)).toMatchObject({ pass: [] });
    // A probe that never reports is replaced once its lease is over.
    expect(check(probe.breaker, ["b"], open.retryAt! + PROBE_LEASE_MS)).toMatchObject({ pass: [0] });
  });

  it("half-open: the probe's success closes it; its failure opens it again for twice as long, capped, the outage's start kept", () => {
    const open = failTimes(FAILURES_TO_OPEN);
    const half = check(open, ["a"], open.retryAt!).breaker;
    expect(record(half, true, open.retryAt! + 5, "a")).toEqual(closedBreaker(ORIGIN));
    const reopened = record(half, false, open.retryAt! + 5, "a");
    expect(reopened).toMatchObject({
      state: "open",
      cooldownMs: 2 * BASE_COOLDOWN_MS,
      retryAt: open.retryAt! + 5 + 2 * BASE_COOLDOWN_MS,
      downSince: open.downSince,
    });
    let b = reopened;
    for (let i = 0; i < 20; i++) b = record(check(b, ["a"], b.retryAt!).breaker, false, b.retryAt!, "a");
    expect(b.cooldownMs).toBe(MAX_COOLDOWN_MS);
    expect(b.downSince).toBe(open.downSince);
  });

  it("any caller's answer saying the origin is up closes it, open or half-open, not only the probe's", () => {
    const open = failTimes(FAILURES_TO_OPEN);
    expect(record(open, true, open.retryAt! - 1, "late-one")).toEqual(closedBreaker(ORIGIN));
    const half = check(open, ["a"], open.retryAt!).breaker;
    expect(record(half, true, open.retryAt! + 1, "b")).toEqual(closedBreaker(ORIGIN));
  });

  it("probes go round the held callers: each cooldown, the one that probed least recently", () => {
    let b = failTimes(FAILURES_TO_OPEN, ["x", "y"]);
    const held = ["broken", "flaky", "slow", "broken", "flaky"];
    const probers: string[] = [];
    for (let round = 0; round < 6; round++) {
      const v = check(b, held, b.retryAt!);
      expect(v.pass).toHaveLength(1);
      probers.push(held[v.pass[0]!]!);
      b = record(v.breaker, false, b.retryAt! + 1, held[v.pass[0]!]!);
    }
    expect(probers).toEqual(["broken", "flaky", "slow", "broken", "flaky", "slow"]);
  });

  it("probes go round the held callers when their runs come one at a time: a caller that probed waits a moment for one whose turn it is", () => {
    const open = failTimes(FAILURES_TO_OPEN, ["x", "y"]);
    // broken, flaky and slow are held while it is open.
    let b = ["broken", "flaky", "slow"].reduce((br, c) => check(br, [c], open.retryAt! - 1).breaker, open);
    const probers: string[] = [];
    for (let round = 0; round < 3; round++) {
      const at = b.retryAt!;
      // broken's run always comes first, alone; then the others, one each.
      let v = check(b, ["broken"], at);
      for (const next of ["flaky", "slow"]) {
        if (v.pass.length > 0) break;
        expect(v.waitUntil).toBe(at + PROBE_TURN_MS);
        v = check(v.breaker, [next], at + 1);
      }
      expect(v.pass).toEqual([0]);
      probers.push(v.breaker.probers.at(-1)!);
      b = record(v.breaker, false, at + 2, probers.at(-1)!);
    }
    expect(probers).toEqual(["broken", "flaky", "slow"]);
    // Whose turn it is never comes: once the moment is over, the one that asks probes.
    const at = b.retryAt!;
    expect(check(b, ["slow"], at)).toMatchObject({ pass: [], waitUntil: at + PROBE_TURN_MS });
    expect(check(b, ["slow"], at + PROBE_TURN_MS)).toMatchObject({ pass: [0] });
  });

  it("an origin down longer than MAX_HOLD_MS: runs that would be held give up instead; the probes still go", () => {
    let b = failTimes(FAILURES_TO_OPEN);
    const since = b.downSince!;
    while (b.retryAt! - since <= MAX_HOLD_MS) b = record(check(b, ["a"], b.retryAt!).breaker, false, b.retryAt!, "a");
    const late = check(b, ["a", "b"], b.retryAt! - 1);
    expect(late).toMatchObject({ pass: [], giveUp: true, downSince: since });
    // "b" has not probed yet: it does.
    expect(check(b, ["a", "b"], b.retryAt!)).toMatchObject({ pass: [1], giveUp: true });
    expect(check(b, ["a"], since + MAX_HOLD_MS)).toMatchObject({ giveUp: false });
  });

  it("closed with no failures: checks and successes change nothing (nothing to write)", () => {
    const b = closedBreaker(ORIGIN);
    expect(check(b, Array(10).fill("a"), 0)).toMatchObject({ breaker: b, pass: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], giveUp: false });
    expect(record(b, true, 0, "a")).toBe(b);
    expect(record(b, null, 0, "a")).toBe(b);
  });

  it("what an outcome says of its origin: down, up, or nothing", () => {
    const table: Array<[number | null, boolean, boolean | null]> = [
      [null, false, false], // no answer: connection refused, DNS, TLS, a timeout
      [502, false, false],
      [503, false, false],
      [504, false, false],
      [429, false, false],
      [521, false, false],
      [530, false, false],
      [500, false, null], // the endpoint's own error
      [501, false, null],
      [408, false, null],
      [200, false, true],
      [301, false, true],
      [404, false, true], // a working origin answered
      [410, false, true],
      [null, true, null], // refused before it was sent
    ];
    for (const [status, refused, says] of table) expect([status, refused, originHealth(status, refused)]).toEqual([status, refused, says]);
  });

  it("a run id names its caller: the job, and a workflow's step", () => {
    expect(callerOf("run_0123456789abcdefghi_lz1x2")).toBe("0123456789abcdefghi");
    expect(callerOf("run_0123456789abcdefghi_m-key")).toBe("0123456789abcdefghi");
    expect(callerOf("run_0123456789abcdefghi_lz1x2.fetch")).toBe("0123456789abcdefghi.fetch");
    expect(callerOf("msg_other")).toBe("msg_other");
  });

  it("a breaker stored by the release before reads with what it lacked as a closed one has it", () => {
    const old = {
      origin: ORIGIN,
      state: "open",
      failures: 5,
      firstFailureAt: 1,
      openedAt: 5,
      retryAt: 30_005,
      cooldownMs: 30_000,
      held: 2,
    };
    expect(storedBreaker(ORIGIN, JSON.stringify(old))).toEqual({ ...old, callers: {}, probers: [], heldCallers: [], downSince: 5 });
  });

  it("property: one caller's failures, whatever they are, never open it; every opening counts several callers", () => {
    const event = fc.record({
      caller: fc.constantFrom("a", "b", "c", "d"),
      status: fc.constantFrom(null, 200, 404, 429, 500, 502, 503),
      dt: fc.integer({ min: 0, max: 120_000 }),
    });
    fc.assert(
      fc.property(fc.array(event, { maxLength: 80 }), (events) => {
        let b: Breaker = closedBreaker(ORIGIN);
        let now = 0;
        const failing = new Set<string>();
        for (const { caller, status, dt } of events) {
          now += dt;
          const ok = originHealth(status, false);
          if (ok === true) failing.clear();
          const before = b;
          // Every run asks first, as the consumer does; a held one reports nothing.
          const v = check(b, [caller], now);
          b = v.breaker;
          if (v.pass.length === 0) continue;
          b = record(b, ok, now, caller);
          if (ok === false) failing.add(caller);
          if (before.state === "closed" && b.state === "open") {
            expect(Object.keys(b.callers).length).toBeGreaterThanOrEqual(2);
            expect(failing.size).toBeGreaterThanOrEqual(2);
          }
          expect(Object.keys(b.callers).length).toBeLessThanOrEqual(FAILURES_TO_OPEN);
          if (ok === true) expect(b.state).toBe("closed");
        }
      }),
    );
  });
});
