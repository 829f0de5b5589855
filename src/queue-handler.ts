import { consumeDeadLetters, consumeDispatches } from "./consumer/consume";
import { metered } from "./metered";
import type { QueueMessage } from "./protocol/queue-messages";
import { isDeadLetterQueue } from "./queues";

/**
 * A batch from any dispatch queue or any of their dead-letter queues: all carry any shard's
 * dispatches. The one queue handler, whichever Worker consumes: the runner (src/runner.ts) when
 * deployed, the scheduler (src/index.ts) in the workerd tests, whose one test Worker consumes too.
 */
export async function handleQueue(batch: MessageBatch<QueueMessage>, env: Env, ctx: ExecutionContext): Promise<void> {
  const dead = isDeadLetterQueue(batch.queue);
  await metered(
    env,
    ctx,
    () => (dead ? "queue dead letters" : "queue"),
    (counted) => (dead ? consumeDeadLetters(batch, counted) : consumeDispatches(batch, counted)),
  );
}
