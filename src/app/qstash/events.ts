import { type CatalogJob, listJobs } from "../../catalog/jobs";
import type { RunView } from "../../protocol/shard-rpc";
import { eventsOfRun, type LogEvent, type LogState } from "../../qstash/events";
import { jobIdOfMessage, messageIdOfJob, messageIdOfRun, runIdOfMessage } from "../../qstash/ids";
import { shardStub } from "../../stubs";
import { type Caller, scopeOf } from "../caller";
import { listStandaloneJobs, loadAnyJob, newestJobs } from "../standalone-jobs";
import { destinationIn, destinationOf } from "./present";

/**
 * GET /v2/events: the logs of the caller's messages, read from their jobs' runs (nothing is kept
 * for it). Pages go by job, newest first, messages and schedules merged: the cursor is the last
 * job a page read.
 */
export interface EventFilter {
  messageIds?: string[];
  state?: LogState[];
  url?: string[];
  topicName?: string[];
  scheduleId?: string[];
  queueName?: string[];
  label?: string[];
  fromDate?: number;
  toDate?: number;
}

/** Runs of a job read for its events: a message has one; a schedule's newest fires. */
const RUNS_PER_JOB = 10;
const JOBS_PER_PAGE = 50;

async function runsOf(env: Env, job: CatalogJob, runId?: string): Promise<RunView[]> {
  const shard = shardStub(env, job.shard);
  const ids = runId ? [runId] : (await shard.listRuns(job.id, RUNS_PER_JOB)).map((r) => r.id);
  // A run read alone has its attempt log, which the events are made of.
  return (await Promise.all(ids.map((id) => shard.getRun(id)))).filter((r): r is RunView => r !== null);
}

async function eventsOfJob(env: Env, job: CatalogJob, runId?: string): Promise<LogEvent[]> {
  const meta = job.spec.target?.qstash;
  if (!meta || !job.spec.target) return [];
  const [runs, url] = await Promise.all([runsOf(env, job, runId), destinationOf(env, job)]);
  return runs.flatMap((run) =>
    eventsOfRun(run, {
      messageId: meta.scheduleId ? messageIdOfRun(run.id) : messageIdOfJob(job.id),
      url,
      ...(meta.topicName !== undefined && { topicName: meta.topicName }),
      ...(meta.endpointName !== undefined && { endpointName: meta.endpointName }),
      ...(meta.label !== undefined && { label: meta.label }),
    }),
  );
}

async function keep(env: Env, job: CatalogJob, f: EventFilter): Promise<boolean> {
  const meta = job.spec.target?.qstash;
  if (!meta) return false;
  const any = (values: string[] | undefined, value: string | undefined) =>
    values === undefined || (value !== undefined && values.includes(value));
  return (
    any(f.topicName, meta.topicName) &&
    any(f.scheduleId, meta.scheduleId) &&
    any(f.queueName, meta.queueName) &&
    (f.label === undefined || (meta.label?.split(",") ?? []).some((l) => f.label!.includes(l))) &&
    // Last: the URL is sealed, and opened only for a job the other fields kept.
    (await destinationIn(env, job, f.url))
  );
}

const inWindow = (e: LogEvent, f: EventFilter) =>
  (f.state === undefined || f.state.includes(e.state)) &&
  (f.fromDate === undefined || e.time >= f.fromDate) &&
  (f.toDate === undefined || e.time <= f.toDate);

export async function listEvents(
  env: Env,
  caller: Caller,
  query: { count: number; cursor?: string; filter: EventFilter },
): Promise<{ events: LogEvent[]; cursor?: string }> {
  const { filter, count } = query;
  if (filter.messageIds) {
    const events: LogEvent[] = [];
    for (const id of filter.messageIds) {
      const runId = runIdOfMessage(id);
      const jobId = jobIdOfMessage(id) ?? (runId ? `job_${runId.slice(4, 23)}` : null);
      const job = jobId ? await loadAnyJob(env, caller, jobId, { includeDeleted: true }).catch(() => null) : null;
      if (job) events.push(...(await eventsOfJob(env, job, runId ?? undefined)));
    }
    return {
      events: events
        .filter((e) => inWindow(e, filter))
        .sort((a, b) => b.time - a.time)
        .slice(0, count),
    };
  }
  // Messages (their shards hold them) and schedules (the catalog's), newest first, one page of both.
  const [held, catalogued] = await Promise.all([
    listStandaloneJobs(env, caller, JOBS_PER_PAGE, query.cursor),
    listJobs(env.DB, scopeOf(caller), JOBS_PER_PAGE, query.cursor),
  ]);
  const jobs = newestJobs([...held, ...catalogued], JOBS_PER_PAGE);
  const events: LogEvent[] = [];
  let last: string | undefined;
  for (const job of jobs) {
    last = job.id;
    if (await keep(env, job, filter)) events.push(...(await eventsOfJob(env, job)).filter((e) => inWindow(e, filter)));
    if (events.length >= count) break;
  }
  const more = jobs.length === JOBS_PER_PAGE || (last !== undefined && last !== jobs.at(-1)?.id);
  return { events: events.slice(0, count), ...(more && last !== undefined && { cursor: last }) };
}
