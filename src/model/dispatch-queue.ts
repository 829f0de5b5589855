import { fnv1a32 } from "./ids";

/**
 * The dispatch queue a shard sends to: its position among the `queueCount` dispatch queues
 * (DISPATCH_QUEUES, in order). A shard named by `shardFor` (`shard-<n>`) takes queue n mod K;
 * jobs spread evenly over shards, so shards spread evenly over queues (exactly when K divides
 * SHARD_COUNT). Any other name takes FNV-1a of itself mod K. Written out, and never to change
 * for a given K: which queue a shard uses must not depend on the release.
 *
 * When K changes, a shard's later dispatches go to its new queue; those already sent stay on
 * the old one and are delivered from there, because every queue's consumer takes any shard's
 * dispatches (the message names its shard: src/consumer/consume.ts). So a queue taken out of
 * DISPATCH_QUEUES keeps its consumer in wrangler.toml until it is empty; a dispatch lost even
 * so goes out again when its run's lease ends (docs/architecture.md, invariants 3 and 5).
 */
export function dispatchQueueIndex(shard: string, queueCount: number): number {
  const numbered = /^shard-(\d{1,15})$/.exec(shard);
  return (numbered ? Number(numbered[1]) : fnv1a32(shard)) % queueCount;
}
