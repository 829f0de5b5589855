import { ApiError } from "../../api/errors";
import type { CatalogJob } from "../../catalog/jobs";
import type { FlowControl } from "../../model/flow-control";
import { base64 } from "../../qstash/callback-body";
import { QstashInputError } from "../../qstash/errors";
import type { MessageOptions } from "../../qstash/headers";
import type { QstashMeta } from "../../qstash/meta";
import { sealCallbacks } from "../../qstash/sealed-callbacks";
import type { Caller } from "../caller";
import { type BatchOutcome, createJobs } from "../create-jobs";
import { queueGroup } from "./queue-groups";
import { tenantOf } from "./tenant";

/**
 * A message or a schedule as the edgecron job that runs it: its target (forwarded headers,
 * Content-Type and body), its attempts (Upstash-Retries + 1) and timeout. The backoff between
 * attempts is the shortest edgecron has: the consumer asks for QStash's delay with each failure
 * (src/qstash/delivery.ts), and the shard waits the longer of the two.
 */
export interface JobDraft {
  url: string;
  options: MessageOptions;
  /** Text, or bytes when the publish's body was not UTF-8. */
  body: string | Uint8Array;
  schedule: { at: string } | { cron: string; timezone?: string };
  meta: QstashMeta;
  name: string | null;
  /** The queue it was enqueued to, and that queue's parallelism then (its group's own limits hold it from there). */
  queue?: { name: string; parallelism: number };
  /** The shard to keep a message in (a callback: its source's, see publish.ts), which its id names. */
  shard?: string;
}

const QSTASH_RETRY = (retries: number) => ({
  maxAttempts: retries + 1,
  backoff: { initialMs: 100, maxMs: 100, factor: 1 },
  jitter: "none" as const,
});

/**
 * The flow-control group a message's job is in: its queue's (`queue:<name>`), whose parallelism
 * the queue sets at the tenant's gate (src/app/qstash/queues.ts), or the one its
 * Upstash-Flow-Control-Key names, with the limits its -Value gives.
 */
export function flowControlOf(draft: Pick<JobDraft, "options" | "queue">): FlowControl | undefined {
  const fc = draft.options.flowControl;
  if (draft.queue && fc)
    throw new QstashInputError(
      "Upstash-Flow-Control-Key",
      "a queue's messages are held to the queue's parallelism; send it to a queue or give flow control, not both",
    );
  if (draft.queue) return { key: queueGroup(draft.queue.name), parallelism: draft.queue.parallelism };
  if (!fc) return undefined;
  if (fc.periodMs !== undefined && fc.periodMs % 1_000 !== 0)
    throw new QstashInputError("Upstash-Flow-Control-Value", "period must be whole seconds");
  return {
    key: fc.key,
    ...(fc.parallelism !== undefined && { parallelism: fc.parallelism }),
    ...(fc.rate !== undefined && { rate: fc.rate }),
    // A period without a rate says nothing (the SDK may send one): it is left out.
    ...(fc.periodMs !== undefined && fc.rate !== undefined && { period: `${fc.periodMs / 1_000}s` }),
  };
}

export function jobInput(draft: JobDraft) {
  const { options, body } = draft;
  if (options.method === "GET" && body.length > 0)
    throw new QstashInputError("Upstash-Method", "a GET request has no body; send none, or another method");
  const flowControl = flowControlOf(draft);
  return {
    ...(flowControl && { flowControl }),
    ...(draft.name !== null && { name: draft.name }),
    schedule: draft.schedule,
    target: {
      url: draft.url,
      method: options.method,
      ...(Object.keys(options.headers).length > 0 && { headers: options.headers }),
      ...(typeof body === "string" ? body !== "" && { body } : body.length > 0 && { bodyBase64: base64(body) }),
    },
    retry: QSTASH_RETRY(options.retries),
    // QStash retries each message on its own schedule: no circuit breaker holds a message
    // because others to the same origin failed (docs/qstash.md).
    breaker: false,
    ...(options.timeoutMs !== undefined && { timeoutMs: options.timeoutMs }),
  };
}

/** Where a job's field came from on the /v2 surface: what an error about it names. */
function qstashField(path: string): string {
  const field = path.replace(/^jobs\[\d+\]\.?/, "");
  if (field.startsWith("target.headers.")) {
    const name = field.slice("target.headers.".length);
    return name.toLowerCase() === "content-type" ? "Content-Type" : `Upstash-Forward-${name}`;
  }
  if (field.startsWith("target.headers")) return "Upstash-Forward-*";
  if (field.startsWith("target.url")) return "destination";
  if (field.startsWith("target.body")) return "body";
  if (field.startsWith("target.method")) return "Upstash-Method";
  if (field.startsWith("retry")) return "Upstash-Retries";
  if (field.startsWith("timeoutMs")) return "Upstash-Timeout";
  if (field.startsWith("schedule.cron") || field.startsWith("schedule.timezone")) return "Upstash-Cron";
  if (field.startsWith("schedule")) return "Upstash-Delay";
  if (field.startsWith("flowControl.key")) return "Upstash-Flow-Control-Key";
  if (field.startsWith("flowControl")) return "Upstash-Flow-Control-Value";
  return field || "request";
}

/** An edgecron refusal of a job, said in the /v2 surface's terms. */
function qstashError(err: ApiError): Error {
  if (err.issues?.length) {
    const [issue] = err.issues;
    return new QstashInputError(qstashField(issue!.path), issue!.message);
  }
  if (err.status === 400) {
    const m = /^(jobs\[\d+\][^:]*): (.*)$/s.exec(err.message);
    if (m) return new QstashInputError(qstashField(m[1]!), m[2]!);
  }
  return new ApiError(err.status, err.code, err.message.replace(/^jobs\[\d+\]: /, ""), err.headers);
}

/**
 * Creates the jobs of `drafts`, all or none: the first refusal is thrown, in QStash's terms.
 * Messages are held by their shards alone (`standalone`); a schedule is a catalog job.
 */
export async function createQstashJobs(
  env: Env,
  caller: Caller,
  drafts: JobDraft[],
  kind: "messages" | "schedules",
  /** A message's job id chosen before (its deduplication id's reservation); undefined: a new one. */
  ids: ReadonlyArray<string | undefined> = [],
): Promise<CatalogJob[]> {
  const inputs = drafts.map(jobInput);
  const tenantId = tenantOf(caller);
  const metas = await Promise.all(drafts.map((d) => sealCallbacks(env.ENCRYPTION_KEYS, d.meta, tenantId)));
  const outcomes: BatchOutcome[] = await createJobs(env, caller, inputs, {
    allOrNothing: true,
    decorate: (job, index) => {
      if (job.spec.target) job.spec.target.qstash = metas[index]!;
    },
    ...(kind === "messages" && {
      standalone: {
        counted: !drafts.some((d) => d.meta.callbackOf !== undefined),
        shardOf: (index: number) => drafts[index]!.shard,
        idOf: (index: number) => ids[index],
      },
    }),
  });
  const failed = outcomes.find((o) => "error" in o);
  if (failed && "error" in failed) throw qstashError(failed.error);
  return outcomes.map((o) => ("state" in o ? o.state.job : null)).filter((j): j is CatalogJob => j !== null);
}
