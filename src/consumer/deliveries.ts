import type { DispatchesMessage, KeyedDispatch } from "../shard/contract";

/** Redelivery waits this long after a first failure, doubling per attempt: a shard that is briefly away gets time to come back. */
const REDELIVERY_BASE_SECONDS = 2;
const REDELIVERY_MAX_SECONDS = 60;

/**
 * One dispatch of a queue message, settled on its own. A message holds several of one shard's
 * dispatches (src/shard/dispatch-packs.ts) and the Queue acks or retries a message whole: it is
 * acked once every one of its dispatches is done, and retried, whole, once they all settled and
 * one must come again. Its other dispatches then come back too; their claims are stale (their
 * runs moved on) and cost the shard a read each. A message the invocation never settles (it
 * threw first) is the Queue's to deliver again, as before.
 */
export interface Delivery {
  readonly shard: string;
  readonly dispatch: KeyedDispatch;
  /** When the Queue took the message: tells the shard how far the queue has got (ClaimRequest.sentAt). */
  readonly sentAt: number;
  /** The shard has this dispatch's outcome, or said it is stale, or holds it for a breaker. */
  done(): void;
  /** This dispatch must come again, after a delay that grows with the message's deliveries. */
  again(): void;
}

/** The batch's dispatch messages, one delivery per dispatch. */
export function unpack(messages: readonly Message<DispatchesMessage>[]): Delivery[] {
  return messages.flatMap((message) => {
    const { shard, ...rest } = message.body;
    const dispatches: KeyedDispatch[] = "dispatches" in rest ? rest.dispatches : [rest];
    if (dispatches.length === 0) {
      message.ack();
      return [];
    }
    let unsettled = dispatches.length;
    let comeAgain = false;
    const sentAt = message.timestamp.getTime();
    return dispatches.map((dispatch): Delivery => {
      let settled = false;
      const settle = (again: boolean) => {
        if (settled) return;
        settled = true;
        comeAgain ||= again;
        if (--unsettled > 0) return;
        if (comeAgain) message.retry({ delaySeconds: redeliveryDelay(message.attempts) });
        else message.ack();
      };
      return { shard, dispatch, sentAt, done: () => settle(false), again: () => settle(true) };
    });
  });
}

/** Seconds before a message delivered `attempts` times comes again. */
export function redeliveryDelay(attempts: number): number {
  return Math.min(REDELIVERY_MAX_SECONDS, REDELIVERY_BASE_SECONDS * 2 ** (attempts - 1));
}
