/**
 * When a dispatch nobody claimed goes out again: the wait after each resend (`claimWait`), and
 * how far the dispatch queue has got, as this shard sees it through the claims it receives,
 * which lets a claim deadline tell a dispatch the queue lost from one it still holds.
 *
 * At a queued run's claim deadline its dispatch is either lost or still waiting in a queue that
 * is behind. Sending it again is right for the first; for the second it adds a message per run
 * to a queue that is already late, and the copy's claim is wasted work once the first arrives
 * (measured: 1.22 to 1.40 messages per run in `npm run bench --workload steady`, whose queue lag
 * passes the 60 s claim timeout). A queue delivers roughly in the order messages were sent, so
 * while it is still delivering dispatches sent before the run was created, it has not reached
 * the run's dispatch yet: its deadline is put off, and the dispatch is sent again only once
 * the queue has delivered something sent after it (or has stopped delivering, which a lost
 * message and a stalled queue look alike in), or once the longest claim wait has passed.
 *
 * Kept in memory only: a shard that restarts knows nothing of the queue and sends at the
 * deadline, as before. A queue that reorders makes this send sooner, never later than that cap.
 */
import type { RunRow } from "./contract";

/** The claim deadline after a dispatch's `redispatches`-th resend: doubling, at most this many claim timeouts. */
export const MAX_CLAIM_WAIT_FACTOR = 16;

export function claimWait(claimTimeoutMs: number, redispatches: number): number {
  return claimTimeoutMs * Math.min(2 ** redispatches, MAX_CLAIM_WAIT_FACTOR);
}

/** The queue counts as delivering if a claim came within this long: a batch or two, even on a slow queue. */
export const DELIVERING_WITHIN_MS = 10_000;

export class QueueProgress {
  /** The latest send time among the dispatches claimed (or found stale) so far. */
  #newestSent = Number.NEGATIVE_INFINITY;
  #lastDelivery = Number.NEGATIVE_INFINITY;

  /** A claim arrived for a dispatch the queue sent at `sentAt` (the message's timestamp), if the consumer said. */
  delivered(sentAt: number | undefined, now: number): void {
    if (sentAt === undefined || !Number.isFinite(sentAt)) return;
    this.#newestSent = Math.max(this.#newestSent, sentAt);
    this.#lastDelivery = Math.max(this.#lastDelivery, now);
  }

  /**
   * Whether the queue has likely not reached `run`'s dispatch yet: it is delivering, and all it
   * delivered was sent before the run was created, so before any dispatch of the run; and the
   * run is younger than the longest claim wait, after which its dispatch goes again regardless.
   */
  behind(run: Pick<RunRow, "createdAt">, now: number, claimTimeoutMs: number): boolean {
    return (
      now - this.#lastDelivery <= DELIVERING_WITHIN_MS &&
      this.#newestSent < run.createdAt &&
      now - run.createdAt < MAX_CLAIM_WAIT_FACTOR * claimTimeoutMs
    );
  }
}
