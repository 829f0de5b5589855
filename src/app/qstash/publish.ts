import { dedupHits, getQueueRow, recordDedup } from "../../catalog/qstash";
import { base64 } from "../../qstash/callback-body";
import type { Destination } from "../../qstash/destination";
import { QstashInputError } from "../../qstash/errors";
import type { MessageOptions } from "../../qstash/headers";
import { messageIdOfJob } from "../../qstash/ids";
import type { QstashMeta } from "../../qstash/meta";
import { openDedupUrl, sealDedupUrl } from "../../qstash/sealed-urls";
import { bodyDigest } from "../../security/request-signature";
import type { Caller } from "../caller";
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
  const hits = await dedupHits(
    env.DB,
    tenantId,
    planned.flatMap((p) => (p.dedupId ? [p.dedupId] : [])),
    now,
  );
  // A remembered answer's URL is sealed: opened for the hits only.
  for (const hit of hits.values()) hit.url = await openDedupUrl(env.ENCRYPTION_KEYS, hit.url, tenantId);
  // A duplicate within the call is answered with the first one's message, as a later call would be.
  const fresh = planned.filter((p, i) => !(p.dedupId && (hits.has(p.dedupId) || planned.findIndex((q) => q.dedupId === p.dedupId) < i)));
  const jobs = await createQstashJobs(
    env,
    caller,
    fresh.flatMap((p) => p.drafts),
    "messages",
  );
  const made = new Map<Planned, Published[]>();
  let next = 0;
  for (const p of fresh) {
    made.set(
      p,
      p.drafts.map((d) => ({ messageId: messageIdOfJob(jobs[next++]!.id), url: d.url })),
    );
  }
  const firsts = new Map<string, Published[]>();
  for (const p of fresh) if (p.dedupId) firsts.set(p.dedupId, made.get(p)!);
  const remembered = await Promise.all(
    fresh.flatMap((p) => {
      if (!p.dedupId) return [];
      const [first] = made.get(p)!;
      return [
        sealDedupUrl(env.ENCRYPTION_KEYS, first!.url, tenantId).then((url) => ({ dedupId: p.dedupId!, messageId: first!.messageId, url })),
      ];
    }),
  );
  await recordDedup(env.DB, tenantId, remembered, now + DEDUP_WINDOW_MS);
  return planned.map((p) => {
    const own = made.get(p);
    if (own) return p.topic ? own : own[0]!;
    const earlier = firsts.get(p.dedupId!)?.[0] ?? hits.get(p.dedupId!)!;
    const answer = { messageId: earlier.messageId, url: earlier.url, deduplicated: true };
    return p.topic ? [answer] : answer;
  });
}
