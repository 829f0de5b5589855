import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DELIVERING_WITHIN_MS, MAX_CLAIM_WAIT_FACTOR, QueueProgress } from "../../src/shard/queue-progress";

const CLAIM_TIMEOUT = 60_000;
const MAX_WAIT = MAX_CLAIM_WAIT_FACTOR * CLAIM_TIMEOUT;
const NOW = 10_000_000;

/** A run created `ageMs` before NOW, its claim deadline come. */
const runAged = (ageMs: number) => ({ createdAt: NOW - ageMs });

describe("queue progress: is the queue behind a run's dispatch, or has it lost it?", () => {
  it("a shard that has seen no claim knows nothing of the queue: the dispatch counts as lost", () => {
    expect(new QueueProgress().behind(runAged(60_000), NOW, CLAIM_TIMEOUT)).toBe(false);
  });

  it("behind while it delivers only dispatches sent before the run was created", () => {
    const q = new QueueProgress();
    q.delivered(NOW - 90_000, NOW - 1_000);
    expect(q.behind(runAged(60_000), NOW, CLAIM_TIMEOUT)).toBe(true);
  });

  it("not behind once it delivered a dispatch sent after the run was created", () => {
    const q = new QueueProgress();
    q.delivered(NOW - 90_000, NOW - 2_000);
    q.delivered(NOW - 59_000, NOW - 1_000);
    expect(q.behind(runAged(60_000), NOW, CLAIM_TIMEOUT)).toBe(false);
  });

  it("not behind once it stopped delivering: a stalled queue and a lost message look alike", () => {
    const q = new QueueProgress();
    q.delivered(NOW - 90_000, NOW - DELIVERING_WITHIN_MS - 1);
    expect(q.behind(runAged(60_000), NOW, CLAIM_TIMEOUT)).toBe(false);
  });

  it("not behind for a run older than the longest claim wait, however far behind the queue is", () => {
    const q = new QueueProgress();
    q.delivered(NOW - 2 * MAX_WAIT, NOW - 1_000);
    expect(q.behind(runAged(MAX_WAIT), NOW, CLAIM_TIMEOUT)).toBe(false);
    expect(q.behind(runAged(MAX_WAIT - 1), NOW, CLAIM_TIMEOUT)).toBe(true);
  });

  it("a claim without a send time (an older consumer) tells nothing", () => {
    const q = new QueueProgress();
    q.delivered(undefined, NOW - 1_000);
    q.delivered(Number.NaN, NOW - 1_000);
    expect(q.behind(runAged(60_000), NOW, CLAIM_TIMEOUT)).toBe(false);
  });

  it("whatever the order claims arrive in, behind means: delivering, and nothing delivered was sent at or after the run's creation", () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ sentAgo: fc.integer({ min: 0, max: 2 * MAX_WAIT }), claimedAgo: fc.integer({ min: 0, max: 60_000 }) }), {
          maxLength: 20,
        }),
        fc.integer({ min: 0, max: 2 * MAX_WAIT }),
        (claims, age) => {
          const q = new QueueProgress();
          for (const c of claims) q.delivered(NOW - c.sentAgo, NOW - c.claimedAgo);
          // What a shard that kept every claim would conclude.
          const expected =
            claims.some((c) => c.claimedAgo <= DELIVERING_WITHIN_MS) && claims.every((c) => NOW - c.sentAgo < NOW - age) && age < MAX_WAIT;
          expect(q.behind(runAged(age), NOW, CLAIM_TIMEOUT)).toBe(expected);
        },
      ),
    );
  });
});
