import type { NotifyEvent, StoredTarget } from "../model/job";
import type { FailureKind } from "../model/run-states";
import type { Sealed } from "../security/sealing";

/**
 * What travels on the Queues between shards and consumers: dispatches (packed, with their
 * orders), notifications, chained triggers and outcomes, and the consumer's lease grace. A
 * message a deploy finds in a queue was written by the release before: shapes here only grow.
 */

/** A dispatch as a shard names it: the run and the fence its attempt was leased under (docs/architecture.md, invariant 4). */
export interface Dispatch {
  runId: string;
  fence: number;
}

/**
 * What a tenant's gate keeps a target's circuit breaker by (src/gate/breaker.ts): the tenant
 * and the target's origin. Absent for a job that opted out.
 */
export interface BreakerKey {
  tenantId: string;
  origin: string;
}

/**
 * Everything a consumer needs to make one attempt of a run, made by the transaction that leased
 * it (the attempt begins when it is dispatched: there is no claim). The target stays sealed:
 * only the consumer opens it, for the request.
 */
export interface RunOrder extends Dispatch {
  jobId: string;
  tenantId: string;
  /** The tenant's signing generation as this shard last heard it: the consumer signs with it and the next. */
  signingGeneration: number;
  /** false: sign with Edgecron-Signature-V2 only; absent: with the first scheme too (TenantSettings). */
  legacySignature?: false;
  attempt: number;
  scheduledAt: number;
  target: StoredTarget;
  timeoutMs: number;
  completionToken: string;
  /** A workflow step's run: the workflow run's id and the step's (sent as headers). */
  step?: { runId: string; stepId: string };
  /** For a step whose target has no body: the JSON it is sent (the run and its parents' results). */
  input?: string;
  /**
   * When the attempt's lease ends (ms since the epoch), as the shard last set it: past it, the
   * shard may send the dispatch again. The consumer starts no request that could not finish by
   * then, and has the lease renewed while the order waits for a connection
   * (src/consumer/lease-keeper.ts). Absent from an order of an earlier release.
   */
  leaseUntil?: number;
}

/**
 * A dispatch on its way: with what the consumer's circuit breakers need, and its order. An order
 * too large for a queue message travels without it (`dispatch-packs.ts`), its lease's end
 * beside it; the consumer then asks the shard for it (`ShardApi.open`), which opens only the
 * dispatch of the lease it names (a copy from before a resend is stale).
 */
export type KeyedDispatch = Dispatch & Partial<BreakerKey> & { order?: RunOrder; leaseUntil?: number };

/**
 * One dispatch on the Queue, with its shard's name, so that the consumer knows whom to ask.
 * What shards sent before dispatches were packed; the consumer still takes it, so that the
 * messages a deploy finds in a queue are not lost, and a dead-letter queue may hold it.
 */
export interface DispatchMessage extends KeyedDispatch {
  shard: string;
}

/**
 * Several dispatches of one shard on the Queue as one message: the Queue bills three operations
 * per 64 KB of a message, so ten dispatches to a message cost a tenth (docs/cost.md). The
 * consumer acks it once each of its dispatches is done, or retries it whole.
 */
export interface DispatchPack {
  shard: string;
  dispatches: KeyedDispatch[];
}

/** A job's notification on its way to its receiver (notifier.ts): everything the consumer needs to send it. */
export interface NotifyMessage {
  kind: "notify";
  shard: string;
  id: string;
  event: NotifyEvent;
  /** The receiver's URL, sealed under the tenant (src/security/notify-urls.ts); in clear from a shard of an earlier release. */
  url: string | Sealed;
  tenantId: string;
  signingGeneration: number;
  /** As a RunOrder's. */
  legacySignature?: false;
  body: string;
}

/**
 * A job to trigger because a run of another job of its tenant ended (onSuccess/onFailure,
 * notifier.ts): the consumer finds the job's shard and asks it for the chained run.
 */
export interface ChainMessage {
  kind: "chain";
  /** The shard of the run that ended, which confirms the message. */
  shard: string;
  id: string;
  tenantId: string;
  jobId: string;
  fromRunId: string;
}

/**
 * Outcomes a consumer could not report to their shard (the shard was unreachable after retries):
 * kept on the queue instead of thrown away, so a success is recorded as one however late
 * (src/consumer/reporter.ts). Its consumer reports them; a failed report retries the message.
 */
export interface OutcomesMessage {
  kind: "outcomes";
  shard: string;
  outcomes: Outcome[];
}

/** What the dispatch queues carry: dispatches of runs (no `kind`, as before notifications), notifications, chained triggers and outcomes kept. */
export type QueueMessage = DispatchPack | DispatchMessage | NotifyMessage | ChainMessage | QstashTimeoutMessage | OutcomesMessage;

/** A message of run dispatches: a pack, or one dispatch as shards sent them before packs. */
export type DispatchesMessage = DispatchPack | DispatchMessage;

/**
 * A QStash message's last attempt that its shard timed out (its lease ran out with no outcome):
 * no consumer saw it fail, so none published its failure callback. The consumer reads the
 * attempt's order from the shard and publishes it (src/consumer/qstash-callbacks.ts), under the
 * attempt's deduplication id: at most once, as any callback. Sent after the commit that ended
 * the run, with no outbox row.
 */
export interface QstashTimeoutMessage {
  kind: "qstash_timeout";
  shard: string;
  id: string;
  tenantId: string;
  runId: string;
  fence: number;
}

export type OutboxMessage = NotifyMessage | ChainMessage | QstashTimeoutMessage;

export const isOutcomesMessage = (m: QueueMessage): m is OutcomesMessage => "kind" in m && m.kind === "outcomes";

export const isOutboxMessage = (m: QueueMessage): m is OutboxMessage => "kind" in m && m.kind !== "outcomes";

/** The Queues limits a `sendBatch` must keep to: 100 messages, 256 KB in all (1 KB = 1,000 bytes); a message holds at most 128 KB. */
export const QUEUE_BATCH_MESSAGES = 100;
export const QUEUE_BATCH_BYTES = 256_000;
/** What the Queue adds to a message's body in a send, allowed for in QUEUE_BATCH_BYTES. */
const MESSAGE_OVERHEAD_BYTES = 100;
const encoder = new TextEncoder();
/** A value's size on the queue: its JSON in UTF-8. */
export const queuedBytesOf = (value: unknown) => encoder.encode(JSON.stringify(value)).length;

/** Messages, in order, as `sendBatch` calls within the Queues limits (QUEUE_BATCH_MESSAGES, QUEUE_BATCH_BYTES). */
export function sendBatches<T>(messages: readonly T[]): T[][] {
  const batches: T[][] = [];
  let batch: T[] = [];
  let batchBytes = 0;
  for (const m of messages) {
    const size = queuedBytesOf(m) + MESSAGE_OVERHEAD_BYTES;
    if (batch.length === QUEUE_BATCH_MESSAGES || (batch.length > 0 && batchBytes + size > QUEUE_BATCH_BYTES)) {
      batches.push(batch);
      batch = [];
      batchBytes = 0;
    }
    batch.push(m);
    batchBytes += size;
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}

/** An attempt may outlive its timeout by this much before the shard calls it lost. */
export const LEASE_GRACE_MS = 5_000;

/** A lease the consumer asks to renew (`ShardApi.renewLeases`): the dispatch, and the end of the lease its order knows. */
export interface LeaseToRenew extends Dispatch {
  leaseUntil: number;
}

/** What the consumer reports of one attempt: the target's answer, or why there was none. */
export interface Outcome {
  runId: string;
  fence: number;
  ok: boolean;
  /** The target answered 202 Accepted: it finishes the work later and completes through the API. */
  accepted?: boolean;
  /** The target's HTTP status; null when it never answered (network error, timeout). */
  status: number | null;
  error: string | null;
  /** From the target's Retry-After header, when it sent one. */
  retryAfterMs?: number;
  /** Set when the status alone does not say it (a target the SSRF guard refused will not improve). */
  kind?: FailureKind;
  /** A workflow step's success: its response body (at most 64 KiB), which the steps below receive. */
  result?: string;
  /** When the consumer started the request (it had a connection): the attempt's start as the target saw it. */
  startedAt?: number;
}
