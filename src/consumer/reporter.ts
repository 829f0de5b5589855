import { failpoint } from "../faults";
import type { Outcome } from "../protocol/queue-messages";
import type { ShardApi } from "../protocol/shard-rpc";

/**
 * A group is sent as soon as this many outcomes are ready: the most dispatches a consumer batch
 * holds (10 messages of 10), so the window below is what ends a group, not its size. Each report
 * is one transaction on the shard and one settle after it, whose cost per call outweighed its
 * cost per outcome: groups of 10 spent 2.6 s of the shards' CPU recording a burst of 10,000
 * outcomes, groups of up to 100 0.9 s (`npm run bench -- --profile`).
 */
export const REPORT_GROUP_SIZE = 100;
/**
 * …or this long after its first one finished: a fast run never waits for a slow neighbour,
 * whose lease it could outlive. When every attempt has finished there is nothing to wait for.
 */
export const REPORT_WINDOW_MS = 50;
export const REPORT_TRIES = 3;
const REPORT_BACKOFF_MS = 100;

interface Waiter {
  outcome: Outcome;
  resolve: (reported: boolean) => void;
  reject: (err: unknown) => void;
}

/**
 * Reports one shard's outcomes as they finish, a few at a time, instead of once for the whole
 * batch. `report` answers whether the outcome is safe: the shard has it (recorded, or stale:
 * there is nothing left to record), or, when the shard could not be told after REPORT_TRIES,
 * it was kept on the queue for the shard (`keep`), so that a success the target gave is
 * recorded as one however late, never lost to a lease that ran out (the run would end dead
 * on its last attempt). Its message may be acked only then.
 */
export class OutcomeReporter {
  #pending: Waiter[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** Attempts still executing: once none are, waiting for company would only add lag. */
  #executing: number;

  constructor(
    private readonly stub: ShardApi,
    private readonly shard: string,
    attempts: number,
    /** Puts outcomes the shard could not be told on the queue, for its consumer to report later. */
    private readonly keep: (outcomes: Outcome[]) => Promise<unknown>,
  ) {
    this.#executing = attempts;
  }

  /**
   * True once the shard answered for this outcome; false if it could not be told (after
   * retries). Called once per attempt the reporter was made for.
   */
  report(outcome: Outcome): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ outcome, resolve, reject });
      this.#executing--;
      if (this.#pending.length >= REPORT_GROUP_SIZE || this.#executing <= 0) this.#flush();
      else this.#timer ??= setTimeout(() => this.#flush(), REPORT_WINDOW_MS);
    });
  }

  /** An attempt the reporter was made for that will not be reported (it was not started). */
  forgo(): void {
    this.#executing--;
    if (this.#executing <= 0) this.#flush();
  }

  #flush(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    const group = this.#pending.splice(0);
    if (group.length === 0) return;
    this.#send(group.map((w) => w.outcome)).then(
      (reported) => {
        for (const w of group) w.resolve(reported);
      },
      (err) => {
        for (const w of group) w.reject(err);
      },
    );
  }

  async #send(outcomes: Outcome[]): Promise<boolean> {
    // A crash here (not a failed call): it takes the invocation down, as a real one would.
    failpoint("consumer.beforeReport", this.shard);
    for (let tries = 1; ; tries++) {
      try {
        failpoint("consumer.report", this.shard);
        await this.stub.report(outcomes);
        return true;
      } catch (err) {
        if (tries >= REPORT_TRIES) return this.#keep(outcomes, err);
        await new Promise((resolve) => setTimeout(resolve, REPORT_BACKOFF_MS * 2 ** (tries - 1)));
      }
    }
  }

  async #keep(outcomes: Outcome[], err: unknown): Promise<boolean> {
    try {
      await this.keep(outcomes);
      console.error(`report to ${this.shard} failed ${REPORT_TRIES} times; its outcomes are kept on the queue`, err);
      return true;
    } catch (keepErr) {
      // Nothing kept: the dispatches come again, and are made again under the same fence.
      console.error(
        `report to ${this.shard} failed ${REPORT_TRIES} times, and keeping its outcomes failed; they go back to the queue`,
        keepErr,
      );
      return false;
    }
  }
}
