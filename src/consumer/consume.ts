import { shardStub, type DispatchMessage, type Env } from "../env";
import type { Outcome } from "../shard/shard";
import { executeTarget } from "./execute";

const REPORT_TRIES = 3;

/**
 * The Queue consumer. Messages are grouped by shard: one claim call and one report call per
 * shard, targets called concurrently (invariant 6). A message is acked once its shard has
 * answered the claim; what happens after that is the shard's to track (leases).
 */
export async function consumeDispatches(batch: MessageBatch<DispatchMessage>, env: Env): Promise<void> {
  const byShard = new Map<string, Message<DispatchMessage>[]>();
  for (const message of batch.messages) {
    const list = byShard.get(message.body.shard) ?? [];
    list.push(message);
    byShard.set(message.body.shard, list);
  }
  await Promise.all([...byShard].map(([shard, messages]) => runShardGroup(env, shard, messages)));
}

async function runShardGroup(env: Env, shard: string, messages: Message<DispatchMessage>[]): Promise<void> {
  const stub = shardStub(env, shard);
  let claims;
  try {
    claims = await stub.claim(messages.map((m) => ({ runId: m.body.runId, fence: m.body.fence })));
  } catch (err) {
    // Nothing was claimed that we know of: let the Queue deliver these again.
    console.error(`claim from ${shard} failed`, err);
    for (const m of messages) m.retry();
    return;
  }
  const outcomes = await Promise.all(claims.flatMap((c) => (c.result === "claimed" ? [executeTarget(c)] : [])));
  if (outcomes.length > 0) await reportOutcomes(stub, shard, outcomes);
  for (const m of messages) m.ack();
}

/**
 * Reports are retried a few times here; if the shard stays unreachable the attempts' leases
 * expire and the shard retries them, so an outcome can be lost but never recorded twice.
 */
async function reportOutcomes(stub: ReturnType<typeof shardStub>, shard: string, outcomes: Outcome[]): Promise<void> {
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
