import { failpoint } from "../faults";
import type { ClaimResult, DispatchMessage, Outcome, ShardApi } from "../shard/contract";
import { shardStub } from "../stubs";
import { type ExecuteContext, executeContext, executeTarget } from "./execute";

const REPORT_TRIES = 3;

/**
 * The Queue consumer. Messages are grouped by shard: one claim call and one report call per
 * shard, targets called concurrently (docs/architecture.md, invariant 6). A message is acked
 * once its shard has answered the claim; what happens after that is the shard's to track
 * (leases).
 */
export async function consumeDispatches(batch: MessageBatch<DispatchMessage>, env: Env): Promise<void> {
  // Read before anything is claimed: a misconfigured Worker then leaves every dispatch to the Queue's retries.
  const context = executeContext(env);
  await Promise.all([...groupByShard(batch.messages)].map(([shard, messages]) => runShardGroup(env, context, shard, messages)));
}

function groupByShard(messages: readonly Message<DispatchMessage>[]): Map<string, Message<DispatchMessage>[]> {
  return Map.groupBy(messages, (m) => m.body.shard);
}

async function runShardGroup(env: Env, context: ExecuteContext, shard: string, messages: Message<DispatchMessage>[]): Promise<void> {
  const stub = shardStub(env, shard);
  let claims: ClaimResult[];
  try {
    failpoint("consumer.beforeClaim", shard);
    claims = await stub.claim(messages.map((m) => ({ runId: m.body.runId, fence: m.body.fence })));
  } catch (err) {
    // Nothing was claimed that we know of: let the Queue deliver these again.
    console.error(`claim from ${shard} failed`, err);
    for (const m of messages) m.retry();
    return;
  }
  const outcomes = await Promise.all(claims.flatMap((c) => (c.result === "claimed" ? [executeTarget(c, context)] : [])));
  failpoint("consumer.beforeReport", shard);
  if (outcomes.length > 0) await reportOutcomes(stub, shard, outcomes);
  for (const m of messages) m.ack();
}

/**
 * The dead-letter queue's consumer: dispatches the Queue could not deliver or claim after its
 * retries, typically while their shard was unreachable. The shard sends each current one out
 * again (the run stays queued, its redispatch count noted), so no dispatch vanishes and no run
 * fails only because its shard was briefly down. If the shard is still unreachable the batch
 * throws and the dead-letter queue delivers it again; should that give up too, the run's own
 * claim deadline sends its dispatch again regardless (docs/architecture.md, invariant 5).
 */
export async function consumeDeadLetters(batch: MessageBatch<DispatchMessage>, env: Env): Promise<void> {
  await Promise.all(
    [...groupByShard(batch.messages)].map(async ([shard, messages]) => {
      await shardStub(env, shard).abandonDispatches(messages.map((m) => ({ runId: m.body.runId, fence: m.body.fence })));
      for (const m of messages) m.ack();
    }),
  );
}

/**
 * Reports are retried a few times here; if the shard stays unreachable the attempts' leases
 * expire and the shard retries them, so an outcome can be lost but never recorded twice.
 */
async function reportOutcomes(stub: ShardApi, shard: string, outcomes: Outcome[]): Promise<void> {
  for (let tries = 1; ; tries++) {
    try {
      await stub.report(outcomes);
      return;
    } catch (err) {
      if (tries >= REPORT_TRIES) {
        console.error(`report to ${shard} failed ${tries} times; leases will retry`, err);
        return;
      }
    }
  }
}
