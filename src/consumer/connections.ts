/**
 * A Worker invocation may have at most six connections waiting for response headers at once;
 * a seventh fetch waits for one of them to free (developers.cloudflare.com/workers/platform/limits,
 * "Simultaneous open connections"). `wrangler dev` does not enforce it, so the consumer does:
 * local runs then queue their targets the way deployed ones do, and an attempt's timeout can
 * start when its request can really be sent.
 */
export const MAX_OPEN_CONNECTIONS = 6;

/**
 * The invocation's connection slots as one request sees them: shared among the batch's tenants
 * (src/consumer/fair-slots.ts), never more than MAX_OPEN_CONNECTIONS held at once.
 */
export interface Slots {
  /** Runs `work` once a slot is granted; the slot is held until `work` settles, whatever it does. */
  hold<T>(work: () => Promise<T>): Promise<T>;
  /** The request was announced but will not ask for a slot (it could not be prepared). */
  forgo(): void;
}
