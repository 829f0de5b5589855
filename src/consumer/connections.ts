/**
 * A Worker invocation may have at most six connections waiting for response headers at once;
 * a seventh fetch waits for one of them to free (developers.cloudflare.com/workers/platform/limits,
 * "Simultaneous open connections"). `wrangler dev` does not enforce it, so the consumer does:
 * local runs then queue their targets the way deployed ones do, and an attempt's timeout can
 * start when its request can really be sent.
 */
export const MAX_OPEN_CONNECTIONS = 6;

/** A counting semaphore over one invocation's connections, first come first served. */
export class ConnectionSlots {
  #free: number;
  readonly #waiting: Array<() => void> = [];

  constructor(size = MAX_OPEN_CONNECTIONS) {
    this.#free = size;
  }

  /** Runs `work` once a slot is free; the slot is held until `work` settles, whatever it does. */
  async hold<T>(work: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await work();
    } finally {
      // The slot passes straight to the next waiter, so a newcomer cannot overtake it.
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    }
  }
}
