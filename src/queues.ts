import { config } from "./config";
import { dispatchQueueIndex } from "./model/dispatch-queue";
import type { QueueMessage } from "./protocol/queue-messages";

/**
 * How a shard reaches its dispatch queue (its runs' dispatches and its jobs' notifications): one of DISPATCH_QUEUES, by the shard's name
 * (src/model/dispatch-queue.ts). Throws Misconfigured when a listed binding is not a queue;
 * a shard takes that like a refused send, keeping its dispatches for a later try.
 */
export function dispatchQueue(env: Env, shard: string): Queue<QueueMessage> {
  const queues = config(env).dispatchQueues;
  const binding = queues[dispatchQueueIndex(shard, queues.length)]!;
  return (env as unknown as Record<string, Queue<QueueMessage>>)[binding]!;
}

/**
 * Whether a batch comes from a dead-letter queue, by the name of the queue it comes from: each
 * dispatch queue's dead-letter queue in wrangler.toml is named for it with "-dlq" at the end,
 * and no dispatch queue's name ends so. The handler is told queue names, never bindings.
 */
export function isDeadLetterQueue(queueName: string): boolean {
  return queueName.endsWith("-dlq");
}
