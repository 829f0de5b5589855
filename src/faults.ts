/**
 * Fault injection for the fault suite. Production code calls `failpoint(name)` at each step a
 * crash can split in two; nothing arms a fault in production, so every call is one lookup in
 * an empty map, and the code path is the one that runs in production. Tests in workerd share
 * the isolate with the Worker and its Durable Objects, so they arm faults with `armFault`.
 */
const FAULT_POINTS = [
  "api.afterCatalogWrite", // POST /v1/jobs: the job is in D1, its shard has not heard of it
  "qstash.afterHandOver", // a publish's messages reached their shards, then the Worker died before answering
  "qstash.scheduleStep", // a schedule upsert died between its steps (scope: "created", its new job made; "named", its id moved to it)
  "catalog.unavailable", // every D1 call fails, as in a D1 outage
  "shard.alarmStart", // the alarm handler throws before doing anything
  "shard.afterCommit", // the alarm committed runs, then died before sending their dispatches
  "shard.betweenChunks", // the alarm committed a chunk of fires and started its sends, then died before the next chunk
  "shard.inFireChunk", // the alarm's transaction of a chunk of fires throws before it commits: rolled back
  "shard.queueSend", // the Queue refuses a sendBatch
  "shard.queueSendAnswer", // the Queue takes a sendBatch, then its answer is lost: the shard sees a failure
  "shard.permitRenew", // a tenant gate refuses a renewal of permits
  "shard.notifySend", // the Queue refuses a sendBatch of notifications
  "shard.sweepCall", // a shard's answer to the sweep (compareJobs, assertAlarm, applyTenants, applyJobs) throws (scope: the shard's name)
  "shard.stepEnded", // a workflow step's run ended and its run moved on, then the shard's transaction died (scope: the job id)
  "shard.countLiveMessages", // a shard refuses to count a tenant's live messages for its gate's recount (scope: the tenant id)
  "archive.write", // a retention pass's write to the R2 archive fails, nothing written (scope: the shard's name)
  "archive.hang", // a retention pass's write to the R2 archive never answers (scope: the shard's name; hangpoint)
  "consumer.beforeExecute", // the consumer dies before calling any target of a shard's dispatches in its batch
  "consumer.beforeReport", // the consumer called the targets, then died before reporting
  "consumer.report", // a report call fails (the shard briefly unreachable); the consumer lives on
] as const;
export type FaultPoint = (typeof FAULT_POINTS)[number];

class InjectedFault extends Error {
  constructor(readonly point: FaultPoint) {
    super(`injected fault at ${point}`);
  }
}

/**
 * Remaining failures per armed point (Infinity: until disarmed), and the scope they are
 * limited to: a shard's name, so that another shard's alarm running meanwhile is unaffected.
 */
const armed = new Map<FaultPoint, { left: number; scope?: string }>();
/** How many times each point has fired, for the suite's report. */
export const faultCounts = new Map<FaultPoint, number>();

export function failpoint(point: FaultPoint, scope?: string): void {
  if (fires(point, scope)) throw new InjectedFault(point);
}

/** A call that never answers rather than failing (a hung subrequest): whether `point` is armed, as failpoint counts it. */
export function hangpoint(point: FaultPoint, scope?: string): boolean {
  return fires(point, scope);
}

function fires(point: FaultPoint, scope: string | undefined): boolean {
  const fault = armed.get(point);
  if (fault === undefined || (fault.scope !== undefined && fault.scope !== scope)) return false;
  if (fault.left <= 1) armed.delete(point);
  else fault.left--;
  faultCounts.set(point, (faultCounts.get(point) ?? 0) + 1);
  return true;
}

export function armFault(point: FaultPoint, times = 1, scope?: string): void {
  armed.set(point, { left: times, scope });
}

/** Disarms one point, if it is still armed for that scope. */
export function disarmFault(point: FaultPoint, scope?: string): void {
  if (armed.get(point)?.scope === scope) armed.delete(point);
}

export function disarmFaults(): void {
  armed.clear();
}
