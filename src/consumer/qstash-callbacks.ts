import { publish } from "../app/qstash/publish";
import { getTenant } from "../catalog/tenants";
import { callbackBody, callbackFor, type DeliveredAnswer } from "../qstash/callback-body";
import { messageIdOfClaim } from "../qstash/delivery";
import { DEFAULT_RETRIES } from "../qstash/headers";
import type { ClaimResult, Outcome } from "../shard/contract";

type Claimed = Extract<ClaimResult, { result: "claimed" }>;

export interface SentRequest {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: string;
}

/**
 * After an attempt of a QStash message: its callback (on success) or failure callback (once it
 * ends without success) is published as a message of its own, signed and retried like any
 * (docs/qstash.md). Published at most once per attempt, whatever redelivers it (its
 * deduplication id is the attempt's). A failure to publish is logged; the attempt's outcome
 * stands.
 */
export async function sendQstashCallback(env: Env, claim: Claimed, outcome: Outcome, sent: SentRequest, answer: DeliveredAnswer) {
  const meta = claim.target.qstash;
  if (!meta) return;
  const final = !outcome.ok && (outcome.kind === "permanent" || claim.attempt >= meta.retries + 1);
  const which = callbackFor(meta, outcome.ok, final);
  if (!which) return;
  const callback = meta[which]!;
  try {
    const tenant = await getTenant(env.DB, claim.tenantId);
    if (!tenant) return;
    const messageId = messageIdOfClaim(meta, claim);
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
    await publish(env, { admin: false, tenant }, [
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
          deduplicationId: `${which}:${claim.runId}:${claim.attempt}`,
          headers: { ...callback.headers, "Content-Type": "application/json" },
        },
        callbackOf: messageId,
      },
    ]);
  } catch (err) {
    console.error(`qstash ${which} of ${claim.runId} (attempt ${claim.attempt}) could not be published`, err);
  }
}
