import type { DispatchesMessage, DispatchPack, KeyedDispatch } from "../protocol/queue-messages";

/** Redelivery waits this long after a first failure, doubling per attempt: a shard that is briefly away gets time to come back. */
const REDELIVERY_BASE_SECONDS = 2;
const REDELIVERY_MAX_SECONDS = 60;

/**
 * One dispatch of a queue message, settled on its own. A message holds several of one shard's
 * dispatches (src/shard/dispatch-packs.ts) and the Queue acks or retries a message whole: it is
 * acked once every one of its dispatches is done. Once they all settled and some must come
 * again, those alone go back on the queue as a message of their own (`resend`) and this one is
 * acked: a dispatch carries its order, so a done one delivered again would call its target
 * again. When all must come again, or the resend fails, the message is retried whole, which
 * keeps the Queue's count of its deliveries (and its dead-letter queue at the end of them). A
 * message the invocation never settles (it threw first) is the Queue's to deliver again.
 */
export interface Delivery {
  readonly shard: string;
  readonly dispatch: KeyedDispatch;
  /** The shard has this dispatch's outcome, or said it is stale, or holds it for a breaker. */
  done(): void;
  /** This dispatch must come again, after a delay that grows with the message's deliveries. */
  again(): void;
}

/** Puts a message's dispatches that must come again back on the queue, after `delaySeconds`. */
export type Resend = (pack: DispatchPack, delaySeconds: number) => Promise<unknown>;

/** The batch's dispatch messages, one delivery per dispatch. */
export function unpack(messages: readonly Message<DispatchesMessage>[], resend?: Resend): Delivery[] {
  return messages.flatMap((message) => {
    const { shard, ...rest } = message.body;
    const dispatches: KeyedDispatch[] = "dispatches" in rest ? rest.dispatches : [rest];
    if (dispatches.length === 0) {
      message.ack();
      return [];
    }
    let unsettled = dispatches.length;
    const comeAgain: KeyedDispatch[] = [];
    const retry = () => message.retry({ delaySeconds: redeliveryDelay(message.attempts) });
    return dispatches.map((dispatch): Delivery => {
      let settled = false;
      const settle = (again: boolean) => {
        if (settled) return;
        settled = true;
        if (again) comeAgain.push(dispatch);
        if (--unsettled > 0) return;
        if (comeAgain.length === 0) message.ack();
        else if (comeAgain.length === dispatches.length || !resend) retry();
        else resend({ shard, dispatches: comeAgain }, redeliveryDelay(message.attempts)).then(() => message.ack(), retry);
      };
      return { shard, dispatch, done: () => settle(false), again: () => settle(true) };
    });
  });
}

/**
 * Copies of one dispatch in one batch (an at-least-once queue may deliver a message twice, and
 * a lease that ended sends its dispatch again) become one delivery, so its target is called
 * once for them all: done settles every copy; again brings one copy back and settles the rest.
 * The copy made is the one whose order carries the latest lease (the shard's latest send): an
 * earlier copy's lease has ended, and it may not start (src/consumer/lease-keeper.ts).
 */
export function oncePerDispatch(deliveries: Delivery[]): Delivery[] {
  const copies = Map.groupBy(deliveries, (d) => `${d.shard}\n${d.dispatch.runId}\n${d.dispatch.fence}`);
  const leaseOf = (d: Delivery) => d.dispatch.order?.leaseUntil ?? d.dispatch.leaseUntil ?? 0;
  return [...copies.values()].map((all) => {
    const [first, ...twins] = all.length > 1 ? all.toSorted((a, b) => leaseOf(b) - leaseOf(a)) : all;
    if (twins.length === 0) return first!;
    const settleTwins = () => {
      for (const twin of twins) twin.done();
    };
    return {
      shard: first!.shard,
      dispatch: first!.dispatch,
      done: () => {
        first!.done();
        settleTwins();
      },
      again: () => {
        first!.again();
        settleTwins();
      },
    };
  });
}

/** Seconds before a message delivered `attempts` times comes again. */
export function redeliveryDelay(attempts: number): number {
  return Math.min(REDELIVERY_MAX_SECONDS, REDELIVERY_BASE_SECONDS * 2 ** (attempts - 1));
}
