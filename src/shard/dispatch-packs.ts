import type { DispatchPack, KeyedDispatch } from "./contract";

/**
 * Dispatches per queue message. The Queue bills three operations per message of up to 64 KB,
 * so ten to a message cut that part of a run's price tenfold (docs/cost.md), and raise a
 * queue's 5,000 messages a second to 50,000 dispatches. Not more: a message is acked or
 * retried whole, so one dispatch that must come again brings its neighbours back (as stale
 * claims: one row read each), and the consumer's batch of 10 messages is then the 100
 * dispatches an invocation took before (wrangler.toml).
 */
export const DISPATCHES_PER_MESSAGE = 10;

/** The Queues limits a `sendBatch` must keep to: 100 messages, 256 KB in all (1 KB = 1,000 bytes). */
export const QUEUE_BATCH_MESSAGES = 100;
export const QUEUE_BATCH_BYTES = 256_000;
/** Each message carries up to ~100 bytes of the Queue's own metadata, counted in a send's 256 KB. */
const MESSAGE_OVERHEAD_BYTES = 100;

const encoder = new TextEncoder();
const bytesOf = (value: unknown) => encoder.encode(JSON.stringify(value)).length;

/**
 * Packs one shard's dispatches, in order, into messages of DISPATCHES_PER_MESSAGE (the last
 * one fewer), and the messages into `sendBatch` calls within the Queues limits. A dispatch is a
 * run id, a fence, a tenant id and an origin: at most a few hundred bytes, so ten stay far
 * below the 64 KB a message is billed by, yet 100 such messages could pass a send's 256 KB.
 * Sizes are counted on the JSON the Queue stores.
 */
export function packDispatches(shard: string, dispatches: readonly KeyedDispatch[]): DispatchPack[][] {
  const batches: DispatchPack[][] = [];
  let batch: DispatchPack[] = [];
  let batchBytes = 0;
  for (let i = 0; i < dispatches.length; i += DISPATCHES_PER_MESSAGE) {
    const pack: DispatchPack = { shard, dispatches: dispatches.slice(i, i + DISPATCHES_PER_MESSAGE) };
    const bytes = bytesOf(pack) + MESSAGE_OVERHEAD_BYTES;
    if (batch.length === QUEUE_BATCH_MESSAGES || (batch.length > 0 && batchBytes + bytes > QUEUE_BATCH_BYTES)) {
      batches.push(batch);
      batch = [];
      batchBytes = 0;
    }
    batch.push(pack);
    batchBytes += bytes;
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}
