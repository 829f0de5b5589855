import { notFound } from "../../api/errors";
import { type CatalogJob, getJobsByIds } from "../../catalog/jobs";
import { removeDeadLetters, removedDeadLetters, restoreDeadLetters } from "../../catalog/qstash";
import { DEAD_LETTER_STATES } from "../../model/run-states";
import type { RunView } from "../../protocol/shard-rpc";
import { messageIdOfJob, messageIdOfRun } from "../../qstash/ids";
import { audit, entryOf } from "../audit";
import type { Caller } from "../caller";
import { deadLetters, getRun, retryRun } from "../runs";
import { standaloneJobsByIds } from "../standalone-jobs";
import { destinationIn } from "./present";

/**
 * /v2/dlq over edgecron's dead letters (runs that ended dead or failed): a dead letter's id is
 * its run's. Deleting one hides it from /v2/dlq (qstash_dlq_removed); the run stays in its
 * shard's history, as /v1 shows it. Retrying one is edgecron's retry of the run.
 */
export interface DeadLetter {
  run: RunView;
  job: CatalogJob;
}

export interface DeadLetterFilter {
  messageId?: string[];
  topicName?: string[];
  scheduleId?: string[];
  url?: string[];
  responseStatus?: number;
  fromDate?: number;
  toDate?: number;
  queueName?: string[];
  label?: string[];
}

async function visible(env: Env, caller: Caller, runs: RunView[]): Promise<DeadLetter[]> {
  const removed = await removedDeadLetters(
    env.DB,
    runs.map((r) => r.id),
  );
  const ids = [...new Set(runs.map((r) => r.jobId))];
  const jobs = new Map((await getJobsByIds(env.DB, ids)).map((j) => [j.id, j]));
  // A message's job is not in the catalog: its shard holds it.
  const held = await standaloneJobsByIds(
    env,
    caller,
    ids.filter((id) => !jobs.has(id)),
  );
  for (const job of held) jobs.set(job.id, job);
  return runs.flatMap((run) => {
    const job = jobs.get(run.jobId);
    // A QStash message's or schedule's only: a /v1 job's dead run is /v1's (/v1/dead-letters).
    return job?.spec.target?.qstash && !removed.has(run.id) && DEAD_LETTER_STATES.includes(run.state) ? [{ run, job }] : [];
  });
}

async function matches(env: Env, d: DeadLetter, f: DeadLetterFilter): Promise<boolean> {
  const meta = d.job.spec.target!.qstash;
  const any = (values: string[] | undefined, value: string | undefined) =>
    values === undefined || (value !== undefined && values.includes(value));
  const messageId = meta?.scheduleId ? messageIdOfRun(d.run.id) : messageIdOfJob(d.job.id);
  return (
    any(f.messageId, messageId) &&
    any(f.topicName, meta?.topicName) &&
    any(f.scheduleId, meta?.scheduleId) &&
    any(f.queueName, meta?.queueName) &&
    (f.label === undefined || (meta?.label?.split(",") ?? []).some((l) => f.label!.includes(l))) &&
    (f.responseStatus === undefined || d.run.status === f.responseStatus) &&
    (f.fromDate === undefined || (d.run.finishedAt ?? 0) >= f.fromDate) &&
    (f.toDate === undefined || (d.run.finishedAt ?? 0) <= f.toDate) &&
    // Last: the URL is sealed, and opened only for a dead letter the other fields kept.
    (await destinationIn(env, d.job, f.url))
  );
}

/** A page of dead letters, newest first, and the cursor of the next (absent at the end). */
export async function listDeadLetters(
  env: Env,
  caller: Caller,
  query: { count: number; cursor?: string; filter: DeadLetterFilter },
): Promise<{ items: DeadLetter[]; cursor?: string }> {
  const page = await deadLetters(env, caller, { limit: query.count, ...(query.cursor !== undefined && { cursor: query.cursor }) });
  const shown = await visible(env, caller, page.items);
  const kept = await Promise.all(shown.map((d) => matches(env, d, query.filter)));
  const items = shown.filter((_, i) => kept[i]);
  return { items, ...(page.nextCursor !== null && { cursor: page.nextCursor }) };
}

export async function getDeadLetter(env: Env, caller: Caller, dlqId: string): Promise<DeadLetter> {
  const run = await getRun(env, caller, dlqId).catch(() => null);
  const [found] = run ? await visible(env, caller, [run]) : [];
  if (!found) throw notFound("dead letter", dlqId);
  return found;
}

/**
 * Deletes dead letters; how many there were to delete (an id already gone counts none). Each
 * has its dlq.delete entry in the batch that hides it, written only if it did.
 */
export async function deleteDeadLetters(env: Env, caller: Caller, ids: string[]): Promise<number> {
  const found = (await Promise.all(ids.map((id) => getDeadLetter(env, caller, id).catch(() => null)))).filter((d) => d !== null);
  const now = Date.now();
  return removeDeadLetters(
    env.DB,
    found.map((d) => {
      const entry = entryOf(
        caller,
        { tenantId: d.job.tenantId, action: "dlq.delete", subject: d.run.id, before: { jobId: d.job.id, state: d.run.state }, after: null },
        now,
      );
      return { tenantId: d.job.tenantId, runId: d.run.id, also: audit(env.DB, entry, { ifChanged: true }) };
    }),
    now,
  );
}

/**
 * Retries dead letters: each run gets another attempt now; the message ids delivered again.
 * Each retry is its run's, audited as one (run.retry, written once the shard answered).
 */
export async function retryDeadLetters(env: Env, caller: Caller, ids: string[]): Promise<DeadLetter[]> {
  const found = (await Promise.all(ids.map((id) => getDeadLetter(env, caller, id).catch(() => null)))).filter((d) => d !== null);
  const retried: DeadLetter[] = [];
  for (const d of found) {
    retried.push({ run: await retryRun(env, caller, d.run.id), job: d.job });
  }
  await restoreDeadLetters(
    env.DB,
    retried.map((d) => d.run.id),
  );
  return retried;
}
