import type { Outcome } from "../protocol/queue-messages";
import { messageIdOfJob, messageIdOfRun } from "./ids";
import type { QstashMeta } from "./meta";
import { retryDelayMs } from "./retry-delay";

/** What a delivery names itself, as QStash's do, and the status that ends retries. */
export const DELIVERED_BY = "Upstash-QStash";
export const NON_RETRYABLE_STATUS = 489;

export interface DeliveryClaim {
  jobId: string;
  runId: string;
  attempt: number;
}

/** The message id a delivery carries: the schedule fire's (its run), or the one-off message's (its job). */
export function messageIdOfClaim(meta: QstashMeta, claim: DeliveryClaim): string {
  return meta.scheduleId ? messageIdOfRun(claim.runId) : messageIdOfJob(claim.jobId);
}

/** QStash's headers on every attempt (the signature is added per hop, over the body sent). */
export function upstashHeaders(meta: QstashMeta, claim: DeliveryClaim): Record<string, string> {
  return {
    "User-Agent": DELIVERED_BY,
    "Upstash-Message-Id": messageIdOfClaim(meta, claim),
    "Upstash-Retried": String(claim.attempt - 1),
    ...(meta.scheduleId && { "Upstash-Schedule-Id": meta.scheduleId }),
    ...(meta.topicName && { "Upstash-Topic-Name": meta.topicName }),
    ...(meta.endpointName && { "Upstash-Endpoint-Name": meta.endpointName }),
    ...(meta.callerIp && { "Upstash-Caller-Ip": meta.callerIp }),
  };
}

/**
 * An attempt's outcome as QStash decides what follows: any failure is retried (4xx too), after
 * the message's retry delay or the target's Retry-After, whichever is longer, except a 489
 * with `Upstash-NonRetryable-Error: true`, which goes straight to the dead letters.
 */
export function qstashOutcome(outcome: Outcome, meta: QstashMeta, attempt: number, nonRetryable: boolean): Outcome {
  if (outcome.ok || outcome.accepted) return outcome;
  if (outcome.status === NON_RETRYABLE_STATUS && nonRetryable) return { ...outcome, kind: "permanent" };
  if (outcome.kind === "permanent" && outcome.status === null) return outcome; // refused by the SSRF guard: will not improve
  const delay = retryDelayMs(attempt, meta.retryDelay);
  return { ...outcome, kind: "retryable", retryAfterMs: Math.max(delay, outcome.retryAfterMs ?? 0) };
}
