import { type CatalogJob, getJobsByIds } from "../catalog/jobs";
import { chainMayFire } from "../model/chains";
import { jobIdOfRun } from "../model/ids";
import type { ChainMessage, NotifyMessage, OutboxMessage, QstashTimeoutMessage } from "../protocol/queue-messages";
import { openNotifyUrl } from "../security/notify-urls";
import { REQUEST_SIGNATURE_HEADER, requestSignature } from "../security/request-signature";
import { SIGNATURE_HEADER, signatureHeader, signingSecrets } from "../security/signing";
import { targetRefusal } from "../security/target-guard";
import { openTarget } from "../security/targets";
import { shardStub } from "../stubs";
import type { ExecuteContext } from "./execute";
import type { FairSlots } from "./fair-slots";
import { sendQstashCallback } from "./qstash-callbacks";

/** A receiver gets this long to answer; a notification is small and nothing waits on it. */
const NOTIFY_TIMEOUT_MS = 10_000;
/** The Queue's own retries of a message not delivered: 5 s, 10 s, 20 s … */
const RETRY_BASE_SECONDS = 5;
const RETRY_MAX_SECONDS = 300;

/**
 * Delivers a batch's outbox messages (src/shard/notifier.ts): each notification is a signed JSON
 * POST under the invocation's connection slots; each chained job is asked of its own shard for
 * the run the ended run triggers. Those delivered are confirmed to their shards, then acked; a
 * failed one goes back to the Queue with a delay. A confirmation that fails leaves the message
 * unacked too: a receiver may hear a notification twice (at least once, with Idempotency-Key),
 * never not at all; a chained job is asked again, and its run's derived id makes that harmless.
 */
export async function deliverOutbox(
  env: Env,
  context: ExecuteContext,
  connections: FairSlots,
  messages: Message<OutboxMessage>[],
): Promise<void> {
  const jobs = await chainedJobs(env, messages);
  const results = await Promise.all(
    messages.map(({ body }) =>
      body.kind === "chain"
        ? triggerChained(env, body, jobs)
        : body.kind === "qstash_timeout"
          ? connections.hold(body.tenantId, () => sendTimedOutCallback(env, body))
          : connections.hold(body.tenantId, () => deliver(body, context)),
    ),
  );
  // A timed-out attempt's callback has no outbox row to confirm.
  for (const [i, m] of messages.entries()) if (m.body.kind === "qstash_timeout" && results[i] === null) m.ack();
  const delivered = messages.filter((m, i) => results[i] === null && m.body.kind !== "qstash_timeout");
  messages.forEach((m, i) => {
    const error = results[i];
    if (error === null) return;
    console.error(
      `${m.body.kind === "notify" ? "notification" : m.body.kind === "chain" ? "chained trigger" : "qstash failure callback"} ${m.body.id}: ${error}`,
    );
    m.retry({ delaySeconds: Math.min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (m.attempts - 1)) });
  });
  await Promise.all(
    [...Map.groupBy(delivered, (m) => m.body.shard)].map(async ([shard, list]) => {
      try {
        await shardStub(env, shard).notificationsDelivered(list.map((m) => m.body.id));
        for (const m of list) m.ack();
      } catch (err) {
        console.error(`shard ${shard}: delivered outbox messages not confirmed; they may be sent again`, err);
        for (const m of list) m.retry({ delaySeconds: RETRY_BASE_SECONDS });
      }
    }),
  );
}

/** The catalog's rows of the batch's chained jobs, in one read; null when D1 could not answer (they are retried). */
async function chainedJobs(env: Env, messages: Message<OutboxMessage>[]): Promise<Map<string, CatalogJob> | null> {
  // The chained jobs, and the jobs whose runs chain them: the chain's prefix is checked on both.
  const ids = [
    ...new Set(messages.flatMap((m) => (m.body.kind === "chain" ? [m.body.jobId, jobIdOfRun(m.body.fromRunId) ?? m.body.jobId] : []))),
  ];
  if (ids.length === 0) return new Map();
  try {
    return new Map((await getJobsByIds(env.DB, ids)).map((job) => [job.id, job]));
  } catch (err) {
    console.error("chained jobs not read from the catalog; their triggers are retried", err);
    return null;
  }
}

/**
 * Asks a chained job's shard for the run a finished run triggers; null once that is settled:
 * the run exists, or it never will (the job is gone, another tenant's, or paused, which is
 * logged), else what went wrong. Never throws.
 */
async function triggerChained(env: Env, m: ChainMessage, jobs: Map<string, CatalogJob> | null): Promise<string | null> {
  if (jobs === null) return "the catalog could not be read";
  const job = jobs.get(m.jobId);
  // Checked again here, not only when the chain was saved: the job may have been deleted since.
  if (!job || job.deletedAt !== null || job.tenantId !== m.tenantId) {
    console.warn(`run ${m.fromRunId}: chained job ${m.jobId} no longer exists; nothing triggered`);
    return null;
  }
  // The key that set the chain may have been limited to a prefix, which the job may have left since.
  const source = jobs.get(jobIdOfRun(m.fromRunId) ?? "");
  if (!chainMayFire(source && source.tenantId === m.tenantId ? source : undefined, job)) {
    console.warn(`run ${m.fromRunId}: chained job ${m.jobId} is outside the job prefix of the key that set the chain; nothing triggered`);
    return null;
  }
  try {
    const answer = await shardStub(env, job.shard).trigger(job.id, { chainedFrom: m.fromRunId });
    if (!answer.ok) console.warn(`run ${m.fromRunId}: chained job ${m.jobId} not triggered (${answer.refusal})`);
    return null;
  } catch (err) {
    return `shard ${job.shard} did not answer: ${(err as Error).message}`;
  }
}

/** Sends one notification; null when the receiver took it (2xx), else what went wrong. Never throws. */
async function deliver(n: NotifyMessage, context: ExecuteContext): Promise<string | null> {
  let url: string;
  try {
    // Sealed at rest and in the queue: opened here only, to send.
    url = await openNotifyUrl(context.encryptionKeys, n.url, n.tenantId);
  } catch (err) {
    return `could not open the receiver's URL: ${(err as Error).message}`;
  }
  const refusal = targetRefusal(url, context.policy);
  if (refusal) return `refused: ${refusal}`;
  try {
    const { current, next } = await signingSecrets(context.signingSecret, n.tenantId, n.signingGeneration);
    const now = Date.now();
    // Signed as a job's requests are; the notification's id stands for the run id and the key.
    const signed = { method: "POST", url, body: n.body, runId: n.id, idempotencyKey: n.id };
    const response = await fetch(url, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "Idempotency-Key": n.id,
        "X-Edgecron-Run-Id": n.id,
        "X-Edgecron-Event": n.event,
        [REQUEST_SIGNATURE_HEADER]: await requestSignature([current, next], signed, now),
        ...(n.legacySignature !== false && { [SIGNATURE_HEADER]: await signatureHeader([current, next], n.id, n.body, now) }),
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

/**
 * The failure callback of a QStash message whose last attempt its shard timed out: the attempt's
 * order read from the shard (null once a revival replaced it), its request opened as the
 * consumer would have sent it, and the callback published as after any failure it saw (with the
 * attempt's deduplication id, so a repeated message publishes it once). Null once settled, else
 * what went wrong (the message is retried).
 */
async function sendTimedOutCallback(env: Env, m: QstashTimeoutMessage): Promise<string | null> {
  let order: Awaited<ReturnType<ReturnType<typeof shardStub>["timedOutOrder"]>>;
  try {
    order = await shardStub(env, m.shard).timedOutOrder(m.runId, m.fence);
  } catch (err) {
    return `shard ${m.shard} did not answer: ${(err as Error).message}`;
  }
  if (!order?.target.qstash) return null;
  const secrets = await openTarget(env.ENCRYPTION_KEYS, order.target, order.jobId);
  const body =
    secrets.bodyBase64 !== undefined
      ? Uint8Array.from(atob(secrets.bodyBase64), (c) => c.charCodeAt(0))
      : typeof secrets.body === "string"
        ? secrets.body
        : secrets.body === undefined
          ? ""
          : JSON.stringify(secrets.body);
  const error = "timed out: no outcome before the lease expired";
  await sendQstashCallback(
    env,
    order,
    { runId: order.runId, fence: order.fence, ok: false, status: null, error, kind: "permanent" },
    { url: secrets.url, method: order.target.method, headers: { ...secrets.headers }, body },
    { status: 0, headers: {}, body: error },
  );
  return null;
}
