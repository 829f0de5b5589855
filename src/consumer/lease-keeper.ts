import type { LeaseToRenew, RunOrder } from "../protocol/queue-messages";

/**
 * Renewal is asked for this long before an order's last start (its lease's end less its
 * timeout): time for the call to the shard, and for a queue of renewals behind a slow one.
 */
export const RENEW_AHEAD_MS = 5_000;

/** Asks one shard to renew leases: each one's new end, or null when it is no longer the order's. */
export type RenewLeases = (shard: string, leases: LeaseToRenew[]) => Promise<Array<number | null>>;

interface Waiting {
  shard: string;
  order: RunOrder;
  /** The lease's end as last heard: the order's, or a renewal's; 0 once the shard said it is not the order's. */
  leaseUntil: number;
  renewing: boolean;
}

/**
 * The leases of one batch's orders while they wait for a connection (src/consumer/fair-slots.ts):
 * a batch of 100 dispatches to 10 s targets shares 6 connections, so its last requests start
 * more than a minute after the batch began, past a lease sized for one attempt. So that no
 * lease ends while its order waits (the shard would send the dispatch again, and the copy call
 * the target a second time), the orders whose last start nears are renewed together, one call
 * per shard (`renew`), for as long as they wait. And an order starts only if its attempt can
 * finish within its lease (`mayStart`): one whose lease could not be renewed (the shard was
 * away, the lease had ended in a queue's backlog) is not started; its lease ends and the shard
 * sends it again, to be called once, by the copy. An order of an earlier release carries no
 * lease and is started as it comes.
 */
export class LeaseKeeper {
  readonly #waiting = new Map<RunOrder, Waiting>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = Number.POSITIVE_INFINITY;

  constructor(
    private readonly renew: RenewLeases,
    private readonly now: () => number = Date.now,
  ) {}

  /** The order waits for a connection from now. */
  wait(shard: string, order: RunOrder): void {
    if (order.leaseUntil === undefined) return;
    this.#waiting.set(order, { shard, order, leaseUntil: order.leaseUntil, renewing: false });
    this.#schedule();
  }

  /** The order has its connection (or will not ask for one): whether its attempt can finish within its lease. It is no longer watched. */
  mayStart(order: RunOrder): boolean {
    const waiting = this.#waiting.get(order);
    this.#waiting.delete(order);
    if (this.#waiting.size === 0) this.#stop();
    if (order.leaseUntil === undefined) return true;
    const leaseUntil = waiting?.leaseUntil ?? order.leaseUntil;
    return this.now() + order.timeoutMs <= leaseUntil;
  }

  /** The last moment an order may start and still finish within its lease. */
  #lastStart(w: Waiting): number {
    return w.leaseUntil - w.order.timeoutMs;
  }

  /** The timer for the earliest renewal due among the orders waiting and not being renewed. */
  #schedule(): void {
    let at = Number.POSITIVE_INFINITY;
    for (const w of this.#waiting.values()) if (!w.renewing && w.leaseUntil > 0) at = Math.min(at, this.#lastStart(w) - RENEW_AHEAD_MS);
    if (at === this.#timerAt) return;
    this.#stop();
    if (at === Number.POSITIVE_INFINITY) return;
    this.#timerAt = at;
    this.#timer = setTimeout(() => this.#renewDue(), Math.max(0, at - this.now()));
  }

  #stop(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
  }

  /**
   * Renews the leases due, with those due within as long again: a batch's orders came
   * together, so their renewals go together too, one call per shard.
   */
  #renewDue(): void {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const horizon = this.now() + 2 * RENEW_AHEAD_MS;
    const due = [...this.#waiting.values()].filter((w) => !w.renewing && w.leaseUntil > 0 && this.#lastStart(w) <= horizon);
    for (const [shard, group] of Map.groupBy(due, (w) => w.shard)) {
      for (const w of group) w.renewing = true;
      const leases = group.map((w) => ({ runId: w.order.runId, fence: w.order.fence, leaseUntil: w.leaseUntil }));
      this.renew(shard, leases).then(
        (ends) => {
          group.forEach((w, i) => {
            w.renewing = false;
            w.leaseUntil = ends[i] ?? 0;
          });
          this.#schedule();
        },
        (err) => {
          // Left as they were: each still starts if its lease allows, and is tried again at the next renewal due.
          console.error(`renewing ${leases.length} leases at ${shard} failed`, err);
          setTimeout(() => {
            for (const w of group) w.renewing = false;
            this.#schedule();
          }, RENEW_AHEAD_MS / 5);
        },
      );
    }
    this.#schedule();
  }
}
