import { notFound } from "../../api/errors";
import { type CatalogJob, listJobs } from "../../catalog/jobs";
import { jobIdOfMessage } from "../../qstash/ids";
import type { Caller } from "../caller";
import { scopeOf } from "../caller";
import { changeJob, loadJob } from "../jobs";
import { destinationIn } from "./present";

/** Messages: the one-off jobs /v2/publish made (a schedule's fires are runs of its job, not messages to cancel). */

export async function loadMessage(env: Env, caller: Caller, messageId: string): Promise<CatalogJob> {
  const jobId = jobIdOfMessage(messageId);
  const job = jobId ? await loadJob(env, caller, jobId).catch(() => null) : null;
  if (!job?.spec.target?.qstash || job.spec.target.qstash.scheduleId !== undefined) throw notFound("message", messageId);
  return job;
}

/** Cancels a message: its job is deleted, so it is not delivered (again) after the answer. */
export async function cancelMessage(env: Env, caller: Caller, messageId: string): Promise<void> {
  const job = await loadMessage(env, caller, messageId);
  await changeJob(env, caller, job.id, { deleted: true });
}

export interface MessageFilter {
  url?: string[];
  queueName?: string[];
  topicName?: string[];
  label?: string[];
  fromDate?: number;
  toDate?: number;
}

const PAGE = 200;
/** Most of a tenant's jobs one search reads (50 pages): a bulk cancel stays within a Worker's subrequests. */
const MAX_PAGES = 50;

/** Up to `count` of the caller's live messages that match `filter`, newest first. */
export async function findMessages(env: Env, caller: Caller, filter: MessageFilter, count: number): Promise<CatalogJob[]> {
  const found: CatalogJob[] = [];
  const match = (job: CatalogJob) => {
    const meta = job.spec.target?.qstash;
    if (!meta || meta.scheduleId !== undefined) return false;
    const any = (values: string[] | undefined, value: string | undefined) =>
      values === undefined || (value !== undefined && values.includes(value));
    return (
      any(filter.queueName, meta.queueName) &&
      any(filter.topicName, meta.topicName) &&
      (filter.label === undefined || (meta.label?.split(",") ?? []).some((l) => filter.label!.includes(l))) &&
      (filter.fromDate === undefined || job.createdAt >= filter.fromDate) &&
      (filter.toDate === undefined || job.createdAt <= filter.toDate)
    );
  };
  for (let before: string | undefined, pages = 0; found.length < count && pages < MAX_PAGES; pages++) {
    const page = await listJobs(env.DB, scopeOf(caller), PAGE, before);
    // The URL is sealed: opened only for the jobs the other fields kept.
    const kept = page.filter(match);
    const urlKept = await Promise.all(kept.map((job) => destinationIn(env, job, filter.url)));
    found.push(...kept.filter((_, i) => urlKept[i]));
    if (page.length < PAGE) break;
    before = page.at(-1)!.id;
  }
  return found.slice(0, count);
}

export async function cancelMessages(env: Env, caller: Caller, jobs: CatalogJob[]): Promise<number> {
  let cancelled = 0;
  for (const job of jobs) {
    await changeJob(env, caller, job.id, { deleted: true });
    cancelled++;
  }
  return cancelled;
}
