import { failpoint } from "../faults";
import { dispatchQueue } from "../queues";
import {
  type ClaimResult,
  type DispatchesMessage,
  isOutboxMessage,
  isOutcomesMessage,
  type OutboxMessage,
  type Outcome,
  type OutcomesMessage,
  type QueueMessage,
} from "../shard/contract";
import { shardStub } from "../stubs";
import { BreakerLog, holdDispatches, screenDispatches } from "./breakers";
import { ConnectionSlots } from "./connections";
import { type Delivery, redeliveryDelay, unpack } from "./deliveries";
import { type ExecuteContext, executeContext, executeTarget } from "./execute";
import { deliverOutbox } from "./outbox";
import { OutcomeReporter } from "./reporter";

/**
 * The Queue consumer. Jobs' notifications and chained triggers go to `deliverOutbox`; run dispatches,
 * several to a message, are grouped by shard: one claim call per shard; the claimed
 * targets then share the invocation's connection slots, and each outcome is reported as it
 * finishes (docs/architecture.md, invariant 6). A dispatch is done once the shard has the
 * outcome of its attempt, or said its claim was stale, or, when the shard could not be told,
 * once the outcome is kept on the queue for it (reporter.ts); never before, so a message whose
 * outcome could be neither goes back to the Queue (its redelivery is stale, and the attempt's
 * lease retries it). A message is acked once all its dispatches are done (deliveries.ts).
 */
export async function consumeDispatches(batch: MessageBatch<QueueMessage>, env: Env): Promise<void> {
  // Read before anything is claimed: a misconfigured Worker then leaves every dispatch to the Queue's retries.
  const context = executeContext(env);
  // One set of slots for the whole batch: the platform's limit is per invocation, not per shard.
  const connections = new ConnectionSlots();
  const { dispatches, outbox, outcomes } = split(batch.messages);
  // Runs whose origin's breaker is open are held before they are claimed: no attempt is spent.
  const { go, held } = await screenDispatches(env, unpack(dispatches));
  const breakers = new BreakerLog();
  await settleAll([
    ...[...groupByShard(go)].map(([shard, deliveries]) => runShardGroup(env, context, connections, breakers, shard, deliveries)),
    holdDispatches(env, held),
    deliverOutbox(env, context, connections, outbox),
    reportKept(env, outcomes),
  ]);
  await breakers.flush(env);
}

/** A batch's run dispatches, its outbox messages (notifications and chained triggers: src/shard/notifier.ts), and outcomes kept for their shards. */
function split(messages: readonly Message<QueueMessage>[]) {
  const dispatches: Message<DispatchesMessage>[] = [];
  const outbox: Message<OutboxMessage>[] = [];
  const outcomes: Message<OutcomesMessage>[] = [];
  for (const m of messages) {
    if (isOutcomesMessage(m.body)) outcomes.push(m as Message<OutcomesMessage>);
    else if (isOutboxMessage(m.body)) outbox.push(m as Message<OutboxMessage>);
    else dispatches.push(m as Message<DispatchesMessage>);
  }
  return { dispatches, outbox, outcomes };
}

/** Outcomes a consumer kept on the queue for a shard it could not reach: reported now; a failure brings the message back. */
async function reportKept(env: Env, messages: readonly Message<OutcomesMessage>[]): Promise<void> {
  await Promise.all(
    messages.map(async (m) => {
      try {
        await shardStub(env, m.body.shard).report(m.body.outcomes);
        m.ack();
      } catch (err) {
        console.error(`kept outcomes for ${m.body.shard}: report failed again`, err);
        m.retry({ delaySeconds: redeliveryDelay(m.attempts) });
      }
    }),
  );
}

function groupByShard(deliveries: readonly Delivery[]): Map<string, Delivery[]> {
  return Map.groupBy(deliveries, (d) => d.shard);
}

async function runShardGroup(
  env: Env,
  context: ExecuteContext,
  connections: ConnectionSlots,
  breakers: BreakerLog,
  shard: string,
  deliveries: Delivery[],
): Promise<void> {
  const stub = shardStub(env, shard);
  let claims: ClaimResult[];
  try {
    failpoint("consumer.beforeClaim", shard);
    claims = await stub.claim(deliveries.map((d) => ({ runId: d.dispatch.runId, fence: d.dispatch.fence, sentAt: d.sentAt })));
  } catch (err) {
    // Nothing was claimed that we know of: let the Queue deliver these again, once the shard had time to recover.
    console.error(`claim from ${shard} failed`, err);
    for (const d of deliveries) d.again();
    return;
  }
  const keep = (outcomes: Outcome[]) => dispatchQueue(env, shard).send({ kind: "outcomes", shard, outcomes }, { contentType: "json" });
  const reporter = new OutcomeReporter(stub, shard, claims.filter((c) => c.result === "claimed").length, keep);
  // The shard answers claims in the order of the dispatches, one each.
  await settleAll(
    claims.map(async (claim, i) => {
      const delivery = deliveries[i]!;
      if (claim.result !== "claimed") return delivery.done();
      const outcome = await executeTarget(claim, context, connections);
      breakers.note(delivery.dispatch, outcome);
      if (await reporter.report(outcome)) delivery.done();
      else delivery.again();
    }),
  );
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
  const { dispatches, outbox, outcomes } = split(batch.messages);
  // An outbox message the Queue gave up on stays in its shard's outbox, which sends it again later.
  for (const m of outbox) m.ack();
  // Kept outcomes are tried once more; should this queue give up too, the attempts' leases retry their runs.
  await reportKept(env, outcomes);
  await Promise.all(
    [...groupByShard(unpack(dispatches))].map(async ([shard, deliveries]) => {
      await shardStub(env, shard).abandonDispatches(deliveries.map((d) => ({ runId: d.dispatch.runId, fence: d.dispatch.fence })));
      for (const d of deliveries) d.done();
    }),
  );
}
