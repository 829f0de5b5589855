import { failpoint } from "../faults";
import { type ClaimResult, type DispatchMessage, isOutboxMessage, type OutboxMessage, type QueueMessage } from "../shard/contract";
import { shardStub } from "../stubs";
import { BreakerLog, holdDispatches, screenDispatches } from "./breakers";
import { ConnectionSlots } from "./connections";
import { type ExecuteContext, executeContext, executeTarget } from "./execute";
import { deliverOutbox } from "./outbox";
import { OutcomeReporter } from "./reporter";

/** Redelivery waits this long after a first failure, doubling per attempt: a shard that is briefly away gets time to come back. */
const REDELIVERY_BASE_SECONDS = 2;
const REDELIVERY_MAX_SECONDS = 60;

/**
 * The Queue consumer. Jobs' notifications and chained triggers go to `deliverOutbox`; run dispatches are
 * grouped by shard: one claim call per shard; the claimed
 * targets then share the invocation's connection slots, and each outcome is reported as it
 * finishes (docs/architecture.md, invariant 6). A message is acked once the shard has the
 * outcome of its attempt, or said its claim was stale; never before, so a message whose outcome
 * was lost goes back to the Queue (its redelivery is stale, and the attempt's lease retries it).
 */
export async function consumeDispatches(batch: MessageBatch<QueueMessage>, env: Env): Promise<void> {
  // Read before anything is claimed: a misconfigured Worker then leaves every dispatch to the Queue's retries.
  const context = executeContext(env);
  // One set of slots for the whole batch: the platform's limit is per invocation, not per shard.
  const connections = new ConnectionSlots();
  const { dispatches, outbox } = split(batch.messages);
  // Runs whose origin's breaker is open are held before they are claimed: no attempt is spent.
  const { go, held } = await screenDispatches(env, dispatches);
  const breakers = new BreakerLog();
  await settleAll([
    ...[...groupByShard(go)].map(([shard, messages]) => runShardGroup(env, context, connections, breakers, shard, messages)),
    holdDispatches(env, held, redeliverLater),
    deliverOutbox(env, context, connections, outbox),
  ]);
  await breakers.flush(env);
}

/** A batch's run dispatches, and its outbox messages: notifications and chained triggers (src/shard/notifier.ts). */
function split(messages: readonly Message<QueueMessage>[]) {
  const dispatches: Message<DispatchMessage>[] = [];
  const outbox: Message<OutboxMessage>[] = [];
  for (const m of messages) {
    if (isOutboxMessage(m.body)) outbox.push(m as Message<OutboxMessage>);
    else dispatches.push(m as Message<DispatchMessage>);
  }
  return { dispatches, outbox };
}

function groupByShard(messages: readonly Message<DispatchMessage>[]): Map<string, Message<DispatchMessage>[]> {
  return Map.groupBy(messages, (m) => m.body.shard);
}

async function runShardGroup(
  env: Env,
  context: ExecuteContext,
  connections: ConnectionSlots,
  breakers: BreakerLog,
  shard: string,
  messages: Message<DispatchMessage>[],
): Promise<void> {
  const stub = shardStub(env, shard);
  let claims: ClaimResult[];
  try {
    failpoint("consumer.beforeClaim", shard);
    claims = await stub.claim(messages.map((m) => ({ runId: m.body.runId, fence: m.body.fence, sentAt: m.timestamp.getTime() })));
  } catch (err) {
    // Nothing was claimed that we know of: let the Queue deliver these again, once the shard had time to recover.
    console.error(`claim from ${shard} failed`, err);
    for (const m of messages) redeliverLater(m);
    return;
  }
  const reporter = new OutcomeReporter(stub, shard, claims.filter((c) => c.result === "claimed").length);
  // The shard answers claims in the order of the dispatches, one each.
  await settleAll(
    claims.map(async (claim, i) => {
      const message = messages[i]!;
      if (claim.result !== "claimed") return message.ack();
      const outcome = await executeTarget(claim, context, connections);
      breakers.note(message.body, outcome);
      if (await reporter.report(outcome)) message.ack();
      else redeliverLater(message);
    }),
  );
}

function redeliverLater(message: Message<DispatchMessage>): void {
  const delaySeconds = Math.min(REDELIVERY_MAX_SECONDS, REDELIVERY_BASE_SECONDS * 2 ** (message.attempts - 1));
  message.retry({ delaySeconds });
}

/**
 * Waits for every task, then fails with the first failure, if any: one shard's crash must not
 * cut short the others' acks, yet must still fail the invocation so its unacked messages return.
 */
async function settleAll(tasks: Promise<unknown>[]): Promise<void> {
  const failed = (await Promise.allSettled(tasks)).find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
}

/**
 * The dead-letter queue's consumer: dispatches the Queue could not deliver or claim after its
 * retries, typically while their shard was unreachable. The shard sends each current one out
 * again (the run stays queued, its redispatch count noted), so no dispatch vanishes and no run
 * fails only because its shard was briefly down. If the shard is still unreachable the batch
 * throws and the dead-letter queue delivers it again; should that give up too, the run's own
 * claim deadline sends its dispatch again regardless (docs/architecture.md, invariant 5).
 */
export async function consumeDeadLetters(batch: MessageBatch<QueueMessage>, env: Env): Promise<void> {
  const { dispatches, outbox } = split(batch.messages);
  // An outbox message the Queue gave up on stays in its shard's outbox, which sends it again later.
  for (const m of outbox) m.ack();
  await Promise.all(
    [...groupByShard(dispatches)].map(async ([shard, messages]) => {
      await shardStub(env, shard).abandonDispatches(messages.map((m) => ({ runId: m.body.runId, fence: m.body.fence })));
      for (const m of messages) m.ack();
    }),
  );
}
