/**
 * Identifiers. Job ids sort by creation time (the list endpoint pages on them); run ids are
 * derived, never random, so that re-running an alarm, a sweep or a trigger can never make a
 * second run for the same fire (docs/architecture.md, invariant 2).
 */
const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

function randomChars(count: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(count));
  return Array.from(bytes, (b) => ALPHABET[b % ALPHABET.length]).join("");
}

/** job_<creation ms in base 36, fixed width><10 random chars>. */
export function newJobId(nowMs: number): string {
  return `job_${nowMs.toString(36).padStart(9, "0")}${randomChars(10)}`;
}

/** Sorts after the id of every job made before `nowMs`, and before those made at or after it. */
export function jobIdsFrom(nowMs: number): string {
  return `job_${nowMs.toString(36).padStart(9, "0")}`;
}

/** The most shards a standalone job's id can name: three base-36 digits. */
export const MAX_NAMED_SHARDS = 36 ** 3;

/**
 * job_<creation ms in base 36, 9 digits><7 random chars><its shard's number, 3 base-36 digits>:
 * the id of a job that only its shard holds (a QStash message), which no catalog row records the
 * shard of. Its id names the shard, so it is found whatever SHARD_COUNT becomes.
 */
export function newStandaloneJobId(nowMs: number, shardNumber: number): string {
  if (!Number.isInteger(shardNumber) || shardNumber < 0 || shardNumber >= MAX_NAMED_SHARDS) {
    throw new RangeError(`shard ${shardNumber} cannot be named in a job id`);
  }
  return `job_${nowMs.toString(36).padStart(9, "0")}${randomChars(7)}${shardNumber.toString(36).padStart(3, "0")}`;
}

/** The shard a standalone job's id names (`shard-<n>`); null if the string is not a job id. */
export function shardNamedBy(jobId: string): string | null {
  return JOB_ID.test(jobId) ? `shard-${Number.parseInt(jobId.slice(-3), 36)}` : null;
}

/** The number of a shard named `shard-<n>`, or null for another name. */
export function shardNumber(shard: string): number | null {
  const m = /^shard-(\d+)$/.exec(shard);
  return m ? Number(m[1]) : null;
}

export const JOB_ID = /^job_[0-9a-z]{19}$/;

const jobPart = (jobId: string) => jobId.slice("job_".length);

/** The run of a scheduled fire: one per (job, instant), whoever creates it and however often. */
export function scheduledRunId(jobId: string, scheduledAtMs: number): string {
  return `run_${jobPart(jobId)}_${scheduledAtMs.toString(36)}`;
}

/**
 * The keys of every run of a job, scheduled or triggered: [from, to), both exclusive of other
 * jobs' runs (`\`` follows `_` in byte order). A shard finds a job's runs as this range of its
 * runs' primary key rather than through an index of its own (docs/cost.md).
 */
export function runKeyRange(jobId: string): [string, string] {
  return [`run_${jobPart(jobId)}_`, `run_${jobPart(jobId)}\``];
}

/**
 * The run of a manual trigger: one per (job, trigger key); the key is the client's or random.
 * `m-` and then the key: the dash keeps it apart from every scheduled run's id, whose base-36
 * instant has none (with `m` alone, the key "ihx2k3f" named the fire at "mihx2k3f" and could
 * take that fire's run). Runs triggered before keep their `m<key>` ids.
 */
export function triggeredRunId(jobId: string, triggerKey: string): string {
  return `run_${jobPart(jobId)}_m-${triggerKey}`;
}

/**
 * The run a finished run of another job triggers (`onSuccess`/`onFailure`): one per (job, run
 * that ended), so that a repeated report or a resent trigger, from whichever shard, makes it
 * once. `c`, the source run's job and its own part, joined by a dash, which no scheduled run's
 * base-36 instant holds and no manual trigger's `m-` starts.
 */
export function chainedRunId(jobId: string, fromRunId: string): string {
  const from = /^run_([0-9a-z]{19})_([0-9A-Za-z-]+)$/.exec(fromRunId);
  if (!from) throw new Error(`not a run id to chain from: ${fromRunId}`);
  return `run_${jobPart(jobId)}_c${from[1]}-${from[2]}`;
}

/** How many chained hops lie between a run and the run that began its chain (0: not chained). */
export function chainDepthOf(runId: string): number {
  let depth = 0;
  for (let id = chainedFromOf(runId); id !== null; id = chainedFromOf(id)) depth++;
  return depth;
}

/** The run that triggered a chained run (`chainedRunId`), or null for any other run. */
export function chainedFromOf(runId: string): string | null {
  const match = /^run_[0-9a-z]{19}_c([0-9a-z]{19})-([0-9A-Za-z-]+)$/.exec(runId);
  return match ? `run_${match[1]}_${match[2]}` : null;
}

export function newTriggerKey(): string {
  return randomChars(16);
}

/**
 * The credential a long-running target uses to complete or extend its attempt: the shard, the
 * attempt's fence, then ~124 random bits. The shard lets the API route the call without
 * reading D1 (recording stays off D1); the fence tells a stale token from a forged one. Only
 * the random part is secret, and the shard checks all of it.
 */
export function newCompletionToken(shard: string, fence: number): string {
  return `${shard}.${fence}.${randomChars(24)}`;
}

export function parseCompletionToken(token: string): { shard: string; fence: number } | null {
  const match = /^(shard-\d{1,6})\.(\d{1,9})\.[0-9a-z]{24}$/.exec(token);
  return match ? { shard: match[1]!, fence: Number(match[2]) } : null;
}

/** A client-chosen trigger key (from its Idempotency-Key header) made safe for a run id. */
export const TRIGGER_KEY = /^[0-9A-Za-z-]{1,64}$/;

/**
 * The longest run id the API takes (a path's id, a page's cursor). The longest there can be: a
 * manual run with a 64-character key (90 characters), chained MAX_CHAIN_DEPTH (20) times, each
 * hop adding 21 (510), then a workflow step's dot and 64-character id (575).
 */
export const MAX_RUN_ID_LENGTH = 600;

/** A workflow step's id (docs/workflows.md): safe in a run id, a header and a URL as it is. */
export const STEP_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The run of one step of a workflow run: the run's id, a dot, the step's id. Derived, so a
 * repeated decision makes nothing twice; inside the job's key range (`runKeyRange`), so the API
 * finds its shard as for any run; and a run's steps are one range of keys of their own
 * (`stepKeyRange`). Neither a scheduled nor a triggered run id holds a dot.
 */
export function stepRunId(runId: string, stepId: string): string {
  return `${runId}.${stepId}`;
}

/** The keys of a workflow run's step runs: [from, to), exclusive of every other run (`/` follows `.`). */
export function stepKeyRange(runId: string): [string, string] {
  return [`${runId}.`, `${runId}/`];
}

/** The workflow run and step of a step run's id, or null for any other id. */
export function stepOfRun(runId: string): { runId: string; stepId: string } | null {
  const dot = runId.indexOf(".");
  return dot < 0 ? null : { runId: runId.slice(0, dot), stepId: runId.slice(dot + 1) };
}

/** The job a run id (a workflow step's run's included) belongs to, or null if the string is not a run id. */
export function jobIdOfRun(runId: string): string | null {
  const match = /^run_([0-9a-z]{19})_[0-9A-Za-z-]+(?:\.[A-Za-z0-9_-]{1,64})?$/.exec(runId);
  return match ? `job_${match[1]}` : null;
}

/**
 * The shard of a job: FNV-1a of its id over the shard count. Written out because it must never
 * change between releases (a job's shard is recorded at creation and read back), which a
 * library's unspecified hash would not promise.
 */
export function shardFor(jobId: string, shardCount: number): string {
  return `shard-${fnv1a32(jobId) % shardCount}`;
}

/** 32-bit FNV-1a: stable across releases and runtimes, which is all its callers need. */
export function fnv1a32(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/** Tenants: ten_<20 random chars>; `default` owns what the admin token creates. */
export const DEFAULT_TENANT = "default";
export const TENANT_ID = /^(default|ten_[0-9a-z]{20})$/;
export const newTenantId = () => `ten_${randomChars(20)}`;

/** An API key's public name (key_…) and the key itself (ek_…, ~186 random bits, shown once). */
export const KEY_ID = /^key_[0-9a-z]{20}$/;
export const newKeyId = () => `key_${randomChars(20)}`;
export const newApiKey = () => `ek_${randomChars(36)}`;
/** The form of every API key issued; a token of any other form is refused without a lookup. */
export const API_KEY = /^ek_[0-9a-z]{36}$/;

/**
 * Audit entries: aud_<instant, base 36 over 9 digits><sequence, 4><6 random chars>, so that ids
 * sort by time. The runtime's clock stands still between I/O, so several entries of one isolate
 * share an instant: the sequence keeps them in the order they were made.
 */
export const AUDIT_ID = /^aud_[0-9a-z]{19}$/;
let lastAudit = { ms: -1, seq: 0 };
export function newAuditId(nowMs: number): string {
  lastAudit = nowMs === lastAudit.ms ? { ms: nowMs, seq: lastAudit.seq + 1 } : { ms: nowMs, seq: 0 };
  const seq = Math.min(lastAudit.seq, 36 ** 4 - 1)
    .toString(36)
    .padStart(4, "0");
  return `aud_${nowMs.toString(36).padStart(9, "0")}${seq}${randomChars(6)}`;
}
