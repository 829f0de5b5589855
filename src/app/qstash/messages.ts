import { notFound } from "../../api/errors";
import { type CatalogJob, listJobs } from "../../catalog/jobs";
import { jobIdOfMessage } from "../../qstash/ids";
import type { Caller } from "../caller";
import { scopeOf } from "../caller";
import { changeJob } from "../jobs";
import { deleteStandaloneJobs, listStandaloneJobs, loadAnyJob, newestJobs } from "../standalone-jobs";
import { destinationIn } from "./present";

/**
 * Messages: the one-off jobs /v2/publish made (a schedule's fires are runs of its job, not
 * messages to cancel). Their shards alone hold them; those published before that was so are
 * catalog jobs, found and cancelled as such.
 */

export async function loadMessage(env: Env, caller: Caller, messageId: string): Promise<CatalogJob> {
  const jobId = jobIdOfMessage(messageId);
  const job = jobId ? await loadAnyJob(env, caller, jobId).catch(() => null) : null;
  if (!job?.spec.target?.qstash || job.spec.target.qstash.scheduleId !== undefined) throw notFound("message", messageId);
  return job;
}

/** Cancels a message: its job is deleted, so it is not delivered (again) after the answer. */
export async function cancelMessage(env: Env, caller: Caller, messageId: string): Promise<void> {
  await cancelJob(env, caller, await loadMessage(env, caller, messageId));
}

async function cancelJob(env: Env, caller: Caller, job: CatalogJob): Promise<void> {
  if (job.standalone) await deleteStandaloneJobs(env, [job]);
  else await changeJob(env, caller, job.id, { deleted: true });
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

/** Up to `count` of the caller's live messages that match `filter`, newest first: those the shards hold, and any left in the catalog. */
export async function findMessages(env: Env, caller: Caller, filter: MessageFilter, count: number): Promise<CatalogJob[]> {
  const match = matcher(filter);
  const [held, catalogued] = await Promise.all([
    search(env, filter, count, match, (before) => listStandaloneJobs(env, caller, PAGE, before)),
    search(env, filter, count, match, (before) => listJobs(env.DB, scopeOf(caller), PAGE, before)),
  ]);
  return newestJobs([...held, ...catalogued], count);
}

function matcher(filter: MessageFilter) {
  return (job: CatalogJob) => {
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
}

/** Pages of jobs, newest first, until `count` match or MAX_PAGES were read. */
async function search(
  env: Env,
  filter: MessageFilter,
  count: number,
  match: (job: CatalogJob) => boolean,
  pageOf: (before: string | undefined) => Promise<CatalogJob[]>,
): Promise<CatalogJob[]> {
  const found: CatalogJob[] = [];
  for (let before: string | undefined, pages = 0; found.length < count && pages < MAX_PAGES; pages++) {
    const page = await pageOf(before);
    // The URL is sealed: opened only for the jobs the other fields kept.
    const kept = page.filter(match);
    const urlKept = await Promise.all(kept.map((job) => destinationIn(env, job, filter.url)));
    found.push(...kept.filter((_, i) => urlKept[i]));
    if (page.length < PAGE) break;
    before = page.at(-1)!.id;
  }
  return found.slice(0, count);
}

/** Cancels messages: those their shards hold, one call per shard; any left in the catalog, one change each. */
export async function cancelMessages(env: Env, caller: Caller, jobs: CatalogJob[]): Promise<number> {
  const held = jobs.filter((j) => j.standalone);
  await deleteStandaloneJobs(env, held);
  for (const job of jobs) if (!job.standalone) await changeJob(env, caller, job.id, { deleted: true });
  return jobs.length;
}
