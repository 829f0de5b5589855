import {
  queuedBytesOf as bytesOf,
  type DispatchPack,
  type KeyedDispatch,
  QUEUE_BATCH_BYTES,
  QUEUE_BATCH_MESSAGES,
  sendBatches,
} from "../protocol/queue-messages";

/**
 * Dispatches per queue message, at most. The Queue bills three operations per 64 KB of a
 * message, so ten to a message cut that part of a run's price tenfold (docs/cost.md), and raise
 * a queue's 5,000 messages a second to 50,000 dispatches. Not more: a message is acked or
 * retried whole, so one dispatch that must come again brings its neighbours back (and the
 * target of each is called again: its attempt is still leased), and the consumer's batch of 10
 * messages is then the 100 dispatches an invocation takes (wrangler.toml).
 */
export const DISPATCHES_PER_MESSAGE = 10;

/** A message is billed by the 64 KB: one is filled up to this, with room for the Queue's own metadata. */
const MESSAGE_BYTES = 63_000;
/**
 * An order larger than this goes without it (a target's body, or a step's input, can be up to
 * 256 KB; a message at most 128 KB): the consumer asks the shard for it (`ShardApi.open`).
 */
const ORDER_MAX_BYTES = 48_000;

export { QUEUE_BATCH_BYTES, QUEUE_BATCH_MESSAGES };

/** What a dispatch adds to its pack's JSON: itself and a comma. */
const sizeInPack = (d: KeyedDispatch) => bytesOf(d) + 1;

/**
 * Packs one shard's dispatches, in order, into messages of up to DISPATCHES_PER_MESSAGE and
 * MESSAGE_BYTES, and the messages into `sendBatch` calls within the Queues limits. A dispatch
 * carries its attempt's order (the sealed target, usually a few hundred bytes to a few KB); one
 * whose order passes ORDER_MAX_BYTES goes without it. Sizes are counted on the JSON the Queue
 * stores.
 */
export function packDispatches(shard: string, dispatches: readonly KeyedDispatch[]): DispatchPack[][] {
  const packs: DispatchPack[] = [];
  const empty = bytesOf({ shard, dispatches: [] });
  let pack: DispatchPack | null = null;
  let packBytes = 0;
  for (const dispatch of dispatches) {
    const d = dispatch.order && bytesOf(dispatch.order) > ORDER_MAX_BYTES ? withoutOrder(dispatch) : dispatch;
    const size = sizeInPack(d);
    if (pack === null || pack.dispatches.length === DISPATCHES_PER_MESSAGE || packBytes + size > MESSAGE_BYTES) {
      pack = { shard, dispatches: [] };
      packBytes = empty;
      packs.push(pack);
    }
    pack.dispatches.push(d);
    packBytes += size;
  }
  return sendBatches(packs);
}

function withoutOrder({ order, ...dispatch }: KeyedDispatch): KeyedDispatch {
  return { ...dispatch, ...(order?.leaseUntil !== undefined && { leaseUntil: order.leaseUntil }) };
}
