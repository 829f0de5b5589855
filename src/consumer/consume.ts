import { failpoint } from "../faults";
import type { Outcome } from "../protocol/queue-messages";
import {
  type DispatchesMessage,
  type DispatchPack,
  isOutboxMessage,
  isOutcomesMessage,
  type OutboxMessage,
  type OutcomesMessage,
  type QueueMessage,
  type RunOrder,
} from "../protocol/queue-messages";
import type { OpenResult, ShardApi } from "../protocol/shard-rpc";
import { dispatchQueue } from "../queues";
import { shardStub } from "../stubs";
import { BreakerLog, holdDispatches, screenDispatches } from "./breakers";
import { type Delivery, oncePerDispatch, redeliveryDelay, unpack } from "./deliveries";
import { type ExecuteContext, executeContext, executeTarget } from "./execute";
import { FairSlots } from "./fair-slots";
import { keptMessages } from "./kept-outcomes";
import { LeaseKeeper } from "./lease-keeper";
import { deliverOutbox } from "./outbox";
import { OutcomeReporter } from "./reporter";

/**
 * The Queue consumer. Jobs' notifications and chained triggers go to `deliverOutbox`; run
 * dispatches, several to a message, each carry their attempt's order (the attempt began when its
 * shard dispatched it: there is no claim), so their targets are called at once, sharing the
 * invocation's connection slots fairly among the batch's tenants (src/consumer/fair-slots.ts), and each shard is told its outcomes as they finish, a group at
 * a time (docs/architecture.md, invariant 6): one call to the shard per group of runs. A
 * dispatch is done once the shard has its outcome (or kept it on the queue for the shard, when
 * the shard could not be told), or said it was stale. A message is acked once all its
 * dispatches are done (src/consumer/deliveries.ts); one that comes again is made again, under
 * the same fence and Idempotency-Key, and its outcome counts once (invariants 4 and 8).
 */
export async function consumeDispatches(batch: MessageBatch<QueueMessage>, env: Env): Promise<void> {
  // Read before any target is called: a misconfigured Worker then leaves every dispatch to the Queue's retries.
  const context = executeContext(env);
  // One set of slots for the whole batch: the platform's limit is per invocation, not per shard.
  const connections = new FairSlots();
  const { dispatches, outbox, outcomes } = split(batch.messages);
  // Runs whose origin's breaker is open are held before their targets are called: no attempt is spent.
  const resend = (pack: DispatchPack, delaySeconds: number) =>
    dispatchQueue(env, pack.shard).send(pack, { contentType: "json", delaySeconds });
  const { go, held } = await screenDispatches(env, oncePerDispatch(unpack(dispatches, resend)));
  // Every request of the batch is announced before any is sent, so each tenant's share of the
  // slots is kept from the start: another tenant's slow targets cannot take it first.
  const groups = await Promise.allSettled([...groupByShard(go)].map(([shard, deliveries]) => ordersOfGroup(env, shard, deliveries)));
  for (const group of groups)
    if (group.status === "fulfilled") for (const { order } of group.value.work) connections.expect(order.tenantId);
  for (const { body } of outbox) if (body.kind === "notify") connections.expect(body.tenantId);
  const breakers = new BreakerLog();
  await settleAll([
    ...groups.map((group) =>
      group.status === "fulfilled" ? runShardGroup(env, context, connections, breakers, group.value) : Promise.reject(group.reason),
    ),
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

function groupByShard(deliveries: readonly Delivery[]): Map<string, Delivery[]> {
  return Map.groupBy(deliveries, (d) => d.shard);
}

interface ShardGroup {
  shard: string;
  stub: ShardApi;
  work: Array<{ delivery: Delivery; order: RunOrder }>;
  /** Dispatches whose orders did not fit the shard's answer (it is bounded by bytes): opened once `work` is done. */
  later: Delivery[];
}

async function ordersOfGroup(env: Env, shard: string, deliveries: Delivery[]): Promise<ShardGroup> {
  failpoint("consumer.beforeExecute", shard);
  const stub = shardStub(env, shard);
  return { shard, stub, ...(await ordersOf(stub, shard, deliveries)) };
}

async function runShardGroup(
  env: Env,
  context: ExecuteContext,
  connections: FairSlots,
  breakers: BreakerLog,
  { shard, stub, work, later }: ShardGroup,
): Promise<void> {
  const keep = async (outcomes: Outcome[]) => {
    for (const batch of keptMessages(shard, outcomes))
      await dispatchQueue(env, shard).sendBatch(batch.map((body) => ({ body, contentType: "json" as const })));
  };
  const reporter = new OutcomeReporter(stub, shard, work.length, keep);
  const leases = new LeaseKeeper((_, renewals) => stub.renewLeases(renewals));
  await settleAll(
    work.map(async ({ delivery, order }) => {
      leases.wait(shard, order);
      const outcome = await executeTarget(order, context, connections.of(order.tenantId), () => leases.mayStart(order));
      if (outcome === null) {
        // Not started: its lease could not cover the attempt. The lease ends and its shard sends it again.
        reporter.forgo();
        delivery.done();
        return;
      }
      breakers.note(delivery.dispatch, outcome);
      if (await reporter.report(outcome)) delivery.done();
      else delivery.again();
    }),
  );
  // The next page of large orders, once this page's are done with: a consumer holds one page at
  // a time (this page's orders are let go first: the batch's groups still point at the first).
  work.splice(0);
  if (later.length > 0) await runShardGroup(env, context, connections, breakers, { shard, stub, ...(await ordersOf(stub, shard, later)) });
}

/**
 * Each dispatch's order: the one it carries, or, for one that came without it (too large for a
 * message), the shard's (one `open` call for all of them, answered up to a bound in bytes: those
 * past it are `later`, for the next page). A stale one is done; if the shard cannot be asked,
 * those dispatches come again.
 */
async function ordersOf(stub: ShardApi, shard: string, deliveries: Delivery[]): Promise<Pick<ShardGroup, "work" | "later">> {
  const work: Array<{ delivery: Delivery; order: RunOrder }> = [];
  const later: Delivery[] = [];
  const thin: Delivery[] = [];
  for (const delivery of deliveries) {
    if (delivery.dispatch.order) work.push({ delivery, order: delivery.dispatch.order });
    else thin.push(delivery);
  }
  if (thin.length === 0) return { work, later };
  let opened: OpenResult[];
  try {
    opened = await stub.open(
      thin.map(({ dispatch: d }) => ({ runId: d.runId, fence: d.fence, ...(d.leaseUntil !== undefined && { leaseUntil: d.leaseUntil }) })),
    );
  } catch (err) {
    console.error(`open at ${shard} failed`, err);
    for (const d of thin) d.again();
    return { work, later };
  }
  // The shard answers in the order of the dispatches, one each.
  opened.forEach((answer, i) => {
    const delivery = thin[i]!;
    if (answer.result === "open") {
      const { result: _, ...order } = answer;
      work.push({ delivery, order });
    } else if (answer.result === "later") {
      later.push(delivery);
    } else {
      delivery.done();
    }
  });
  return { work, later };
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

/**
 * Waits for every task, then fails with the first failure, if any: one shard's crash must not
 * cut short the others' acks, yet must still fail the invocation so its unacked messages return.
 */
async function settleAll(tasks: Promise<unknown>[]): Promise<void> {
  const failed = (await Promise.allSettled(tasks)).find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
}

/**
 * The dead-letter queue's consumer: dispatches the Queue could not deliver, or whose outcomes
 * could not be reported, after its retries, typically while their shard was unreachable. The
 * shard sends each one still leased and without an outcome out again (the attempt stays the
 * same, its redispatch count noted), so no dispatch vanishes and no run fails only because its
 * shard was briefly down. If the shard is still unreachable the batch throws and the dead-letter
 * queue delivers it again; should that give up too, the attempt's lease sends its dispatch again
 * regardless (docs/architecture.md, invariant 5).
 */
export async function consumeDeadLetters(batch: MessageBatch<QueueMessage>, env: Env): Promise<void> {
  const { dispatches, outbox, outcomes } = split(batch.messages);
  // An outbox message the Queue gave up on stays in its shard's outbox, which sends it again later.
  for (const m of outbox) m.ack();
  // Kept outcomes are tried again here; should this queue give up too, the attempts' leases send their runs again.
  await reportKept(env, outcomes);
  await Promise.all(
    [...groupByShard(unpack(dispatches))].map(async ([shard, deliveries]) => {
      await shardStub(env, shard).abandonDispatches(deliveries.map((d) => ({ runId: d.dispatch.runId, fence: d.dispatch.fence })));
      for (const d of deliveries) d.done();
    }),
  );
}
