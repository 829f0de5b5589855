import { SIGNATURE_HEADER, signatureHeader, signingSecrets } from "../security/signing";
import { targetRefusal } from "../security/target-guard";
import type { NotifyMessage } from "../shard/contract";
import { shardStub } from "../stubs";
import type { ConnectionSlots } from "./connections";
import type { ExecuteContext } from "./execute";

/** A receiver gets this long to answer; a notification is small and nothing waits on it. */
const NOTIFY_TIMEOUT_MS = 10_000;
/** The Queue's own retries of a notification whose receiver failed: 5 s, 10 s, 20 s … */
const RETRY_BASE_SECONDS = 5;
const RETRY_MAX_SECONDS = 300;

/**
 * Delivers a batch's notifications (src/shard/notifier.ts): a signed JSON POST each, under the
 * invocation's connection slots. Those delivered are confirmed to their shards, then acked; a
 * failed one goes back to the Queue with a delay. A confirmation that fails leaves the message
 * unacked too: the receiver may hear it twice (at least once, with Idempotency-Key), never not at all.
 */
export async function deliverNotifications(
  env: Env,
  context: ExecuteContext,
  connections: ConnectionSlots,
  messages: Message<NotifyMessage>[],
): Promise<void> {
  const results = await Promise.all(messages.map((m) => connections.hold(() => deliver(m.body, context))));
  const delivered = messages.filter((_, i) => results[i] === null);
  messages.forEach((m, i) => {
    const error = results[i];
    if (error === null) return;
    console.error(`notification ${m.body.id} to ${m.body.url}: ${error}`);
    m.retry({ delaySeconds: Math.min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (m.attempts - 1)) });
  });
  await Promise.all(
    [...Map.groupBy(delivered, (m) => m.body.shard)].map(async ([shard, list]) => {
      try {
        await shardStub(env, shard).notificationsDelivered(list.map((m) => m.body.id));
        for (const m of list) m.ack();
      } catch (err) {
        console.error(`shard ${shard}: delivered notifications not confirmed; they may be sent again`, err);
        for (const m of list) m.retry({ delaySeconds: RETRY_BASE_SECONDS });
      }
    }),
  );
}

/** Sends one notification; null when the receiver took it (2xx), else what went wrong. Never throws. */
async function deliver(n: NotifyMessage, context: ExecuteContext): Promise<string | null> {
  const refusal = targetRefusal(n.url, context.policy);
  if (refusal) return `refused: ${refusal}`;
  try {
    const { current, next } = await signingSecrets(context.signingSecret, n.tenantId, n.signingGeneration);
    const response = await fetch(n.url, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "Idempotency-Key": n.id,
        "X-Edgecron-Event": n.event,
        [SIGNATURE_HEADER]: await signatureHeader([current, next], n.id, n.body, Date.now()),
      },
      body: n.body,
      // A redirect is not followed: the receiver named is the one that must answer.
      redirect: "manual",
      signal: AbortSignal.timeout(NOTIFY_TIMEOUT_MS),
    });
    await response.body?.cancel();
    return response.ok ? null : `HTTP ${response.status}`;
  } catch (err) {
    return `request failed: ${(err as Error).message}`;
  }
}
