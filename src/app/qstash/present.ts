import type { CatalogJob } from "../../catalog/jobs";
import type { RunView } from "../../protocol/shard-rpc";
import { messageIdOfJob, messageIdOfRun } from "../../qstash/ids";
import type { QstashMeta } from "../../qstash/meta";
import { callbackOriginOf, openCallback } from "../../qstash/sealed-callbacks";
import { bodyDigest, HIDDEN_VALUE, reducedUrl } from "../../security/reduced";
import { openTarget } from "../../security/targets";
import { cronText } from "./cron";

/** Edgecron jobs and runs in the shapes of QStash's API (the SDK's Message, Schedule, DlqMessage). */

const NO_META: QstashMeta = { retries: 2 };

/** The URL a message is delivered to, sealed at rest with its headers and body. */
export async function destinationOf(env: Env, job: CatalogJob): Promise<string> {
  return (await openTarget(env.ENCRYPTION_KEYS, job.spec.target!, job.id)).url;
}

/**
 * Whether a job's destination is one of `urls` (a list's `url` filter; no filter, every job). A
 * target that cannot be opened (its key left ENCRYPTION_KEYS) matches no URL.
 */
export async function destinationIn(env: Env, job: CatalogJob, urls: string[] | undefined): Promise<boolean> {
  if (urls === undefined) return true;
  const url = await destinationOf(env, job).catch(() => null);
  return url !== null && urls.includes(url);
}

/**
 * What is sealed of a message: its URL, headers as QStash lists them (each name to its values),
 * body and callback URLs; opened if the caller sees sealed values whole (`whole`), otherwise
 * reduced (src/security/reduced.ts): origins, header names with their values hidden, the
 * body's size and SHA-256.
 */
async function opened(env: Env, job: CatalogJob, whole: boolean) {
  const keys = env.ENCRYPTION_KEYS;
  const { url, ...secrets } = await openTarget(keys, job.spec.target!, job.id);
  const meta = job.spec.target!.qstash;
  if (!whole) {
    const header = Object.fromEntries(Object.keys(secrets.headers ?? {}).map((k) => [k, [HIDDEN_VALUE]]));
    const callbacks = {
      ...(meta?.callback && { callback: callbackOriginOf(meta.callback) }),
      ...(meta?.failureCallback && { failureCallback: callbackOriginOf(meta.failureCallback) }),
    };
    return { url: reducedUrl(url), header, ...(await bodyDigest(secrets)), ...callbacks, reduced: true as const };
  }
  const callbacks = {
    ...(meta?.callback && { callback: (await openCallback(keys, meta.callback, job.tenantId)).url }),
    ...(meta?.failureCallback && { failureCallback: (await openCallback(keys, meta.failureCallback, job.tenantId)).url }),
  };
  const header = Object.fromEntries(Object.entries(secrets.headers ?? {}).map(([k, v]) => [k, [v]]));
  // A binary body shows as QStash shows one: base64, in `bodyBase64`.
  if (secrets.bodyBase64 !== undefined) return { url, header, bodyBase64: secrets.bodyBase64, ...callbacks };
  const body = secrets.body === undefined ? undefined : typeof secrets.body === "string" ? secrets.body : JSON.stringify(secrets.body);
  return { url, header, body, ...callbacks };
}

function common(job: CatalogJob) {
  const target = job.spec.target!;
  const meta = target.qstash ?? { ...NO_META, retries: job.spec.retry.maxAttempts - 1 };
  return {
    method: target.method,
    maxRetries: meta.retries,
    ...(meta.retryDelay !== undefined && { retryDelayExpression: meta.retryDelay }),
    ...(meta.queueName !== undefined && { queueName: meta.queueName }),
    ...(meta.scheduleId !== undefined && { scheduleId: meta.scheduleId }),
    ...(meta.topicName !== undefined && { topicName: meta.topicName }),
    ...(meta.endpointName !== undefined && { endpointName: meta.endpointName }),
    ...(meta.callerIp !== undefined && { callerIp: meta.callerIp }),
    ...(meta.flowControlKey !== undefined && { flowControlKey: meta.flowControlKey }),
    ...(meta.label !== undefined && { label: meta.label, labels: meta.label.split(",") }),
  };
}

/** The views take `whole`: does the caller see sealed values whole (src/app/caller.ts, seesSealed)? */

export async function presentMessage(env: Env, job: CatalogJob, whole: boolean) {
  const at = job.spec.schedule.at;
  return {
    messageId: messageIdOfJob(job.id),
    ...common(job),
    ...(await opened(env, job, whole)),
    ...(at !== undefined && { notBefore: Date.parse(at) }),
    createdAt: job.createdAt,
  };
}

export async function presentSchedule(
  env: Env,
  scheduleId: string,
  job: CatalogJob,
  createdAt: number,
  nextRunAt: number | null,
  whole: boolean,
) {
  const shared = common(job);
  const { url, ...target } = await opened(env, job, whole);
  return {
    scheduleId,
    cron: cronText(job.spec.schedule),
    createdAt,
    destination: url,
    ...shared,
    retries: shared.maxRetries,
    ...target,
    isPaused: job.paused,
    ...(nextRunAt !== null && { nextScheduleTime: nextRunAt }),
  };
}

/** A dead letter: the run that ended without success, with what its last attempt answered. */
export async function presentDeadLetter(env: Env, run: RunView, job: CatalogJob, whole: boolean) {
  const meta = job.spec.target?.qstash;
  const messageId = meta?.scheduleId ? messageIdOfRun(run.id) : messageIdOfJob(job.id);
  const response = run.error?.match(/^HTTP \d+: ([\s\S]*)$/)?.[1];
  return {
    dlqId: run.id,
    messageId,
    ...common(job),
    ...(await opened(env, job, whole)),
    createdAt: run.createdAt,
    ...(run.status !== null && { responseStatus: run.status }),
    ...(response !== undefined && { responseBody: response }),
    ...(run.error !== null && { error: run.error }),
  };
}
