import { publish } from "../app/qstash/publish";
import { CatalogUnavailable } from "../catalog/d1";
import { getTenant } from "../catalog/tenants";
import { parseCompletionToken } from "../model/ids";
import { ALL_SCOPES } from "../model/scopes";
import type { Outcome, RunOrder } from "../protocol/queue-messages";
import { callbackBody, callbackFor, type DeliveredAnswer } from "../qstash/callback-body";
import { messageIdOfClaim } from "../qstash/delivery";
import { DEFAULT_RETRIES } from "../qstash/headers";
import { openCallback } from "../qstash/sealed-callbacks";

/** Who publishes a callback, for the audit log: edgecron itself, on the message's tenant's behalf. */
const CALLBACK_KEY = { id: "edgecron:qstash-callback", scopes: ALL_SCOPES, jobPrefix: null };

export interface SentRequest {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: string | Uint8Array;
}

/**
 * After an attempt of a QStash message: its callback (on success) or failure callback (once it
 * ends without success) is published as a message of its own, signed and retried like any
 * (docs/qstash.md). Published at most once per attempt, whatever redelivers it (its
 * deduplication id is the attempt's: its run, number and fence). A failure to publish is logged; the attempt's outcome
 * stands.
 */
export async function sendQstashCallback(env: Env, claim: RunOrder, outcome: Outcome, sent: SentRequest, answer: DeliveredAnswer) {
  const meta = claim.target.qstash;
  if (!meta) return;
  const final = !outcome.ok && (outcome.kind === "permanent" || claim.attempt >= meta.retries + 1);
  const which = callbackFor(meta, outcome.ok, final);
  if (!which) return;
  for (let tries = 1; ; tries++) {
    try {
      return await publishCallback(env, claim, which, sent, answer);
    } catch (err) {
      // The catalog briefly unavailable (locally, two processes sharing its file): tried again.
      if (err instanceof CatalogUnavailable && tries < CALLBACK_TRIES) {
        await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** (tries - 1)));
        continue;
      }
      console.error(`qstash ${which} of ${claim.runId} (attempt ${claim.attempt}) could not be published`, err);
      return;
    }
  }
}

const CALLBACK_TRIES = 4;

async function publishCallback(
  env: Env,
  claim: RunOrder,
  which: "callback" | "failureCallback",
  sent: SentRequest,
  answer: DeliveredAnswer,
) {
  const meta = claim.target.qstash!;
  const callback = await openCallback(env.ENCRYPTION_KEYS, meta[which]!, claim.tenantId);
  const tenant = await getTenant(env.DB, claim.tenantId);
  if (!tenant) return;
  const messageId = messageIdOfClaim(meta, claim);
  // The shard the order came from, which the completion token names: the callback's job goes there too.
  const shard = parseCompletionToken(claim.completionToken)?.shard;
  const body = callbackBody(
    meta,
    {
      messageId,
      url: sent.url,
      method: sent.method,
      headers: sent.headers,
      body: sent.body,
      attempt: claim.attempt,
      createdAt: claim.scheduledAt,
      ...(which === "failureCallback" && { dlqId: claim.runId }),
    },
    answer,
  );
  const now = Date.now();
  await publish(env, { admin: false, tenant, key: CALLBACK_KEY }, [
    {
      destination: { url: callback.url },
      body,
      options: {
        method: (callback.method as "POST" | undefined) ?? "POST",
        notBeforeMs: now + (callback.delayMs ?? 0),
        delayMs: callback.delayMs ?? 0,
        retries: callback.retries ?? DEFAULT_RETRIES,
        ...(callback.timeoutMs !== undefined && { timeoutMs: callback.timeoutMs }),
        contentBasedDeduplication: false,
        // One per delivery of an attempt: the fence, which a dead letter's retry raises while its
        // attempts count from 1 again, keeps the retry's callbacks apart from the first ones'.
        deduplicationId: `${which}:${claim.runId}:${claim.attempt}:${claim.fence}`,
        headers: { ...callback.headers, "Content-Type": "application/json" },
      },
      callbackOf: messageId,
      ...(shard !== undefined && { shard }),
    },
  ]);
}
