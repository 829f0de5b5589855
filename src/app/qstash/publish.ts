import { confirmDedup, getQueueRow, reserveDedup } from "../../catalog/qstash";
import { config } from "../../config";
import { failpoint } from "../../faults";
import { base64 } from "../../qstash/callback-body";
import type { Destination } from "../../qstash/destination";
import { QstashInputError } from "../../qstash/errors";
import type { MessageOptions } from "../../qstash/headers";
import { jobIdOfMessage, messageIdOfJob } from "../../qstash/ids";
import type { QstashMeta } from "../../qstash/meta";
import { openDedupUrl, sealDedupUrl } from "../../qstash/sealed-urls";
import { bodyDigest } from "../../security/request-signature";
import type { Caller } from "../caller";
import { standaloneJobId } from "../create-jobs";
import { MAX_MESSAGES_PER_REQUEST } from "../message-quota";
import { createQstashJobs, type JobDraft } from "./jobs";
import { tenantOf } from "./tenant";
import { readUrlGroup } from "./url-groups";

/**
 * Publishing: POST /v2/publish, /v2/enqueue and /v2/batch. Each message is a one-off edgecron
 * job that its shard alone holds (docs/qstash.md), due at Upstash-Not-Before or after
 * Upstash-Delay; a URL group's message is one job per endpoint. Every message of a call is
 * checked before any is created, and then each shard takes its messages in one call.
 */
export interface PublishRequest {
  destination: Destination;
  options: MessageOptions;
  body: string | Uint8Array;
  /** /v2/enqueue/{queue}, or a batch item's `queue`. */
  queueName?: string;
  callerIp?: string;
  /** A callback's message: the message whose outcome it reports (it is itself not called back). */
  callbackOf?: string;
  /**
   * A callback's message is kept in its source message's shard: it is published by the consumer,
   * which may be the runner Worker, and the runner should only reach shards that already run
   * (a shard first reached from another Worker's process locally would not know its own name).
   */
  shard?: string;
}

export interface Published {
  messageId: string;
  url: string;
  deduplicated?: boolean;
}

/** A publish's answer: one message, or a URL group's, one per endpoint. */
export type PublishAnswer = Published | Published[];

/** How long a deduplication id holds: QStash's ten minutes. */
export const DEDUP_WINDOW_MS = 10 * 60_000;

interface Planned {
  request: PublishRequest;
  dedupId?: string;
  /** Drafts of this request: one, or one per endpoint of its URL group. */
  drafts: JobDraft[];
  topic: boolean;
}

function metaOf(request: PublishRequest): QstashMeta {
  const { options } = request;
  return {
    retries: options.retries,
    ...(options.retryDelay !== undefined && { retryDelay: options.retryDelay }),
    ...(options.callback && { callback: options.callback }),
    ...(options.failureCallback && { failureCallback: options.failureCallback }),
    ...(request.queueName !== undefined && { queueName: request.queueName }),
    ...(options.label !== undefined && { label: options.label }),
    ...(options.flowControl && { flowControlKey: options.flowControl.key }),
    ...(request.callerIp !== undefined && { callerIp: request.callerIp }),
    ...(request.callbackOf !== undefined && { callbackOf: request.callbackOf }),
  };
}

async function dedupIdOf(request: PublishRequest): Promise<string | undefined> {
  const { options } = request;
  if (options.deduplicationId !== undefined) return `id:${options.deduplicationId}`;
  if (!options.contentBasedDeduplication) return undefined;
  const dest = "url" in request.destination ? request.destination.url : `topic:${request.destination.topic}`;
  const body = typeof request.body === "string" ? request.body : { base64: base64(request.body) };
  return `content:${await bodyDigest(JSON.stringify([dest, request.options.headers, body]))}`;
}

async function plan(env: Env, tenantId: string, request: PublishRequest, now: number): Promise<Planned> {
  const { destination, options } = request;
  const queue = request.queueName === undefined ? null : await getQueueRow(env.DB, tenantId, request.queueName);
  if (request.queueName !== undefined && !queue) {
    throw new QstashInputError("queue", `no queue named ${request.queueName}; create it with POST /v2/queues first`, 404);
  }
  const at = new Date(Math.max(options.notBeforeMs, now)).toISOString();
  const draft = (url: string, extra: Partial<QstashMeta>): JobDraft => ({
    url,
    options,
    body: request.body,
    schedule: { at },
    meta: { ...metaOf(request), ...extra },
    name: options.label ?? null,
    ...(queue && { queue: { name: queue.name, parallelism: queue.parallelism } }),
    ...(request.shard !== undefined && { shard: request.shard }),
  });
  const dedupId = await dedupIdOf(request);
  if ("url" in destination) return { request, dedupId, drafts: [draft(destination.url, {})], topic: false };
  const topic = await readUrlGroup(env, tenantId, destination.topic);
  if (!topic || topic.endpoints.length === 0) {
    throw new QstashInputError("destination", `no URL group named ${destination.topic} with endpoints`, 404);
  }
  const drafts = topic.endpoints.map((e) => draft(e.url, { topicName: topic.name, ...(e.name !== undefined && { endpointName: e.name }) }));
  return { request, dedupId, drafts, topic: true };
}

/**
 * Deduplication reserves each id before its messages are made (catalog/qstash.ts, one D1
 * transaction), with the message ids it will make: of concurrent calls with one id, one wins and
 * makes them; the others answer with its messages. A reservation whose messages were not
 * confirmed made (its call failed after reserving, perhaps after handing them over) is made by
 * the next call with the id, under the same message ids: a shard takes a job id it holds at most
 * once (applyJobs is by version), so a retry after a failure never makes a second message.
 */
export async function publish(env: Env, caller: Caller, requests: PublishRequest[]): Promise<PublishAnswer[]> {
  const now = Date.now();
  const tenantId = tenantOf(caller);
  const planned = await Promise.all(requests.map((r) => plan(env, tenantId, r, now)));
  const messages = planned.reduce((n, p) => n + p.drafts.length, 0);
  if (messages > MAX_MESSAGES_PER_REQUEST) {
    throw new QstashInputError(
      requests.length > 1 ? "body" : "destination",
      `this request would make ${messages} messages (one per item, and per endpoint of a URL group); at most ${MAX_MESSAGES_PER_REQUEST} a request`,
    );
  }
  // A duplicate within the call is answered with the first one's messages, as a later call would be.
  const firstOf = new Map<string, Planned>();
  for (const p of planned) if (p.dedupId && !firstOf.has(p.dedupId)) firstOf.set(p.dedupId, p);
  const { shardCount } = config(env);
  const candidates = new Map(
    [...firstOf.values()].map((p) => [p, p.drafts.map((d) => standaloneJobId(d.shard, shardCount, now))] as const),
  );
  const reservations = await reserveDedup(
    env.DB,
    tenantId,
    await Promise.all(
      [...candidates].map(async ([p, ids]) => ({
        dedupId: p.dedupId!,
        messageIds: ids.map(messageIdOfJob),
        url: await sealDedupUrl(env.ENCRYPTION_KEYS, p.drafts[0]!.url, tenantId),
      })),
    ),
    now + DEDUP_WINDOW_MS,
    now,
  );
  /** What each request makes, under which job ids (undefined: new ones); absent: answered by a reservation. */
  const makes = new Map<Planned, Array<string | undefined>>();
  for (const p of planned) {
    if (!p.dedupId)
      makes.set(
        p,
        p.drafts.map(() => undefined),
      );
    else if (firstOf.get(p.dedupId) !== p) continue;
    else {
      const r = reservations.get(p.dedupId)!;
      if (r.won) makes.set(p, candidates.get(p)!);
      // Reserved by a call that did not confirm its messages: made again, under the same ids.
      else if (!r.made)
        makes.set(
          p,
          p.drafts.map((_, i) => jobIdOfMessage(r.messageIds[i] ?? "") ?? undefined),
        );
    }
  }
  const fresh = [...makes.keys()];
  const jobs = await createQstashJobs(
    env,
    caller,
    fresh.flatMap((p) => p.drafts),
    "messages",
    fresh.flatMap((p) => makes.get(p)!),
  );
  failpoint("qstash.afterHandOver");
  await confirmDedup(
    env.DB,
    tenantId,
    fresh.flatMap((p) => (p.dedupId ? [p.dedupId] : [])),
  );
  const made = new Map<Planned, Published[]>();
  let next = 0;
  for (const p of fresh) {
    made.set(
      p,
      p.drafts.map((d) => ({ messageId: messageIdOfJob(jobs[next++]!.id), url: d.url })),
    );
  }
  const remembered = new Map<string, Published>();
  for (const [dedupId, r] of reservations) {
    if (r.made && !r.won)
      remembered.set(dedupId, { messageId: r.messageIds[0]!, url: await openDedupUrl(env.ENCRYPTION_KEYS, r.url, tenantId) });
  }
  return planned.map((p) => {
    const own = made.get(p);
    const first = p.dedupId ? firstOf.get(p.dedupId) : undefined;
    // Made here under another call's reservation: that call's messages, now made, answered as its.
    const reserved = own && p.dedupId !== undefined && !reservations.get(p.dedupId)!.won;
    if (own && !reserved) return p.topic ? own : own[0]!;
    const earlier = own?.[0] ?? (first && first !== p ? made.get(first)?.[0] : undefined) ?? remembered.get(p.dedupId!)!;
    const answer = { messageId: earlier.messageId, url: earlier.url, deduplicated: true };
    return p.topic ? [answer] : answer;
  });
}
