import { ApiError, issuesOf } from "../api/errors";
import { guard } from "../catalog/d1";
import { inserted, insertJobsStatement, ROWS_PER_INSERT } from "../catalog/insert-jobs";
import { type CatalogJob, toDefinition } from "../catalog/jobs";
import { registerShards } from "../catalog/shards";
import { getTenant, settingsOf, type Tenant, tenantStatement, toTenant } from "../catalog/tenants";
import { config } from "../config";
import { failpoint } from "../faults";
import { CHAIN_FIELDS, recordChainPrefixes } from "../model/chains";
import { DEFAULT_TENANT, MAX_NAMED_SHARDS, newJobId, newStandaloneJobId, shardFor, shardNamedBy, shardNumber } from "../model/ids";
import { type CreateJob, CreateJobSchema, canonicalSchedule } from "../model/job";
import type { JobRuntime } from "../protocol/stored-rows";
import { firstFire } from "../schedule/next-fire";
import { chunksOf } from "../sql";
import { shardStub } from "../stubs";
import { acceptSteps, acceptTarget } from "./accept-targets";
import { audit, entryOf } from "./audit";
import { type Caller, grantOf } from "./caller";
import { checkChains } from "./chains";
import { forgetJobRoom, quotaExceeded, takeJobRoom } from "./job-room";
import { checkJobName, type Given, type JobState, jobRecord } from "./jobs";
import { reserveMessages } from "./message-quota";
import { acceptNotify } from "./notify";

/**
 * Creating jobs, one (POST /v1/jobs) or a batch (POST /v1/jobs/batch), the same way: each is
 * accepted (checked beyond its schema, its target sealed, its id and shard chosen once:
 * docs/architecture.md, invariant 1), written to the catalog under the tenant's quota, then
 * handed to its shard, one `applyJobs` call per shard however many jobs it gets. A lost shard
 * call is the sweep's to repair: its change feed finds new jobs by id.
 */

/** Most jobs one batch may create. */
export const MAX_BATCH_JOBS = 1_000;

export async function createJob(env: Env, caller: Caller, input: CreateJob): Promise<JobState> {
  const now = Date.now();
  checkJobName(caller, input.name);
  const job = await acceptJob(env, tenantIdOf(caller), grantOf(caller).jobPrefix, input, now, { held: false });
  const given = givenOf(input);
  const tenant = caller.admin ? await insertAsAdmin(env, caller, job) : await insertLeased(env, caller, caller.tenant, job);
  failpoint("api.afterCatalogWrite");
  const runtimes = await handOver(env, tenant, [{ index: 0, job, given }], leftToSweep(now));
  return { job, runtime: runtimes.get(job.id), given };
}

/**
 * The admin's jobs are the default tenant's, read in the same round trip as the insert; should
 * it have a quota, that insert writes nothing and the job is written on room leased from its
 * gate, as a tenant's. The audit entry is written only if the job was.
 */
async function insertAsAdmin(env: Env, caller: Caller, job: CatalogJob): Promise<Tenant> {
  const statements = [
    tenantStatement(env.DB, DEFAULT_TENANT),
    insertJobsStatement(env.DB, [job], null),
    audit(env.DB, createdEntry(caller, job), { ifChanged: true }),
  ];
  const results = await guard("insert", () => env.DB.batch<Record<string, unknown>>(statements));
  const tenant = tenantOf(results[0]!.results[0]);
  if (!inserted(results[1]!)) return insertLeased(env, caller, tenant, job);
  return tenant;
}

/** A tenant's job, on room leased from its gate (job-room.ts); refused (403) when it has none. */
async function insertLeased(env: Env, caller: Caller, tenant: Tenant, job: CatalogJob): Promise<Tenant> {
  const { created } = await insertUnderQuota(env, caller, tenant, [{ index: 0, job, given: {} }], false);
  if (created.length === 0) throw quotaExceeded(tenant);
  return tenant;
}

/** Times jobs an INSERT left out on a lease get room again (their gate counted again meanwhile, or set a quota). */
const INSERT_ATTEMPTS = 3;

/**
 * Writes `list` (a tenant's new jobs) on room leased from its gate, as many as it has room for
 * (with `partial`) or none, the first ones first: each INSERT followed by its jobs' audit
 * entries, written only if it inserted them, all in one D1 batch. Jobs an INSERT left out get
 * room again: on a lease the gate has counted again since, or with none where the tenant, read
 * before its quota was set, has one now.
 */
async function insertUnderQuota(
  env: Env,
  caller: Caller,
  tenant: Tenant,
  list: Accepted[],
  partial: boolean,
): Promise<{ created: Accepted[]; refused: Accepted[] }> {
  const created: Accepted[] = [];
  const refused: Accepted[] = [];
  let pending = list;
  let current = tenant;
  for (let attempt = 1; pending.length > 0; attempt++) {
    const room = await takeJobRoom(env, current, pending.length, partial);
    if ("retryAfterMs" in room) {
      refused.push(...pending);
      break;
    }
    const { written, left } = await insertChunks(env, caller, pending.slice(0, room.got), room.epoch);
    created.push(...written);
    refused.push(...pending.slice(room.got));
    pending = left;
    if (left.length === 0) break;
    if (attempt === INSERT_ATTEMPTS) {
      refused.push(...left);
      break;
    }
    if (room.epoch !== null) forgetJobRoom(current.id);
    else current = (await getTenant(env.DB, current.id)) ?? current;
  }
  return { created, refused: refused.sort((a, b) => a.index - b.index) };
}

/** Inserts `list` in INSERTs of ROWS_PER_INSERT, each with its audit entries, in one D1 batch; what each INSERT wrote or left out. */
async function insertChunks(
  env: Env,
  caller: Caller,
  list: Accepted[],
  epoch: number | null,
): Promise<{ written: Accepted[]; left: Accepted[] }> {
  const chunks = chunksOf(list, ROWS_PER_INSERT);
  const statements = chunks.flatMap((chunk) => [
    insertJobsStatement(env.DB, jobsOf(chunk), epoch),
    audit(
      env.DB,
      chunk.map((a) => createdEntry(caller, a.job)),
      { ifChanged: true },
    ),
  ]);
  const results = statements.length === 0 ? [] : await guard("insert", () => env.DB.batch(statements));
  const written: Accepted[] = [];
  const left: Accepted[] = [];
  for (const [i, chunk] of chunks.entries()) (inserted(results[2 * i]!) ? written : left).push(...chunk);
  return { written, left };
}

/**
 * How the /v2 (QStash) surface creates its messages and schedules through the same path:
 * `decorate` adds to each accepted job (its target's QStash delivery settings) before it is
 * written; `allOrNothing` creates nothing when any item is refused by its checks.
 */
export interface CreateOptions {
  decorate?: (job: CatalogJob, index: number) => void;
  allOrNothing?: boolean;
  /**
   * QStash messages: held by their shards alone (`standalone`, docs/qstash.md), with no catalog
   * row, so not under `maxJobs` and with no audit entry (a message is data, not configuration:
   * docs/security.md). `counted`: they are reserved under the tenant's `maxLiveMessages` at its
   * gate (message-quota.ts) once every item passed its checks; a callback's message, which the
   * consumer publishes, is not. `shardOf` may name an item's shard (a callback's, beside its
   * message). A standalone job's id names its shard, since the id is all that finds it later.
   */
  standalone?: { counted: boolean; shardOf?: (index: number) => string | undefined; idOf?: (index: number) => string | undefined };
}

/** Each item of a batch: created, or why not (a 4xx naming the item, and its field if it was one). */
export type BatchOutcome = { index: number; state: JobState } | { index: number; error: ApiError };

interface Accepted {
  index: number;
  job: CatalogJob;
  given: Given;
}

const givenOf = ({ target, steps, notify }: CreateJob): Given => ({ target, steps, notify });

/**
 * Creates what it can of `items`, each answered on its own, in order. An item that fails its
 * checks writes nothing; those that pass are created, as many as the quota has room for, the
 * first ones first. D1 unreachable fails the whole call (503) with nothing written: the inserts
 * are one batch, a transaction.
 */
export async function createJobs(
  env: Env,
  caller: Caller,
  items: readonly unknown[],
  options: CreateOptions = {},
): Promise<BatchOutcome[]> {
  const now = Date.now();
  const tenantId = tenantIdOf(caller);
  const outcomes: BatchOutcome[] = [];
  const accepted: Accepted[] = [];
  const placeOf = (index: number): Placement =>
    options.standalone ? { held: true, shard: options.standalone.shardOf?.(index), id: options.standalone.idOf?.(index) } : { held: false };
  const checked = await Promise.all(items.map((item, index) => acceptItem(env, caller, tenantId, item, index, now, placeOf(index))));
  for (const c of checked) {
    if ("job" in c) accepted.push(c);
    else outcomes[c.index] = c;
  }
  if (accepted.length === 0) return outcomes;
  // All or nothing: one item refused creates none of them.
  if (options.allOrNothing && accepted.length < items.length) return outcomes;
  for (const { index, job } of accepted) options.decorate?.(job, index);
  if (options.standalone) return handOverStandalone(env, caller, accepted, outcomes, options.standalone.counted);

  // The admin's jobs are the default tenant's: read first, for its quota and its settings.
  const tenant = caller.admin ? tenantOf((await getTenant(env.DB, DEFAULT_TENANT)) ?? undefined) : caller.tenant;
  const { created, refused: refusedItems } = await insertUnderQuota(env, caller, tenant, accepted, true);
  const refused = quotaExceeded(tenant);
  for (const { index } of refusedItems) outcomes[index] = { index, error: itemError(index, refused) };
  failpoint("api.afterCatalogWrite");
  const runtimes = await handOver(env, tenant, created, leftToSweep(now));
  for (const { index, job, given } of created) outcomes[index] = { index, state: { job, runtime: runtimes.get(job.id), given } };
  return outcomes;
}

/** One item of a batch, checked as POST /v1/jobs checks its body; its errors name it. */
async function acceptItem(
  env: Env,
  caller: Caller,
  tenantId: string,
  item: unknown,
  index: number,
  now: number,
  place: Placement,
): Promise<Accepted | BatchOutcome> {
  const parsed = CreateJobSchema.safeParse(item);
  if (!parsed.success) return { index, error: itemError(index, new ApiError(400, "invalid_request", "", {}, issuesOf(parsed.error))) };
  try {
    checkJobName(caller, parsed.data.name);
    return { index, job: await acceptJob(env, tenantId, grantOf(caller).jobPrefix, parsed.data, now, place), given: givenOf(parsed.data) };
  } catch (err) {
    // Anything else (D1 unreachable while checking chains) fails the whole call.
    if (err instanceof ApiError) return { index, error: itemError(index, err) };
    throw err;
  }
}

const jobsOf = (list: Accepted[]) => list.map((a) => a.job);

const createdEntry = (caller: Caller, job: CatalogJob) =>
  entryOf(caller, { tenantId: job.tenantId, action: "job.create", subject: job.id, after: jobRecord(job) }, job.createdAt);

const tenantIdOf = (caller: Caller) => (caller.admin ? DEFAULT_TENANT : caller.tenant.id);

function tenantOf(found: Record<string, unknown> | Tenant | undefined): Tenant {
  if (!found) throw new Error(`tenant ${DEFAULT_TENANT} is missing: are the D1 migrations applied?`);
  return "limits" in found ? (found as Tenant) : toTenant(found);
}

/** An item's error, its fields named from the request's root: `jobs[3].schedule.cron`. */
function itemError(index: number, err: ApiError): ApiError {
  const at = (path: string) => (path === "(body)" ? `jobs[${index}]` : `jobs[${index}].${path}`);
  if (!err.issues) return new ApiError(err.status, err.code, `jobs[${index}]: ${err.message}`);
  const issues = err.issues.map((i) => ({ path: at(i.path), message: i.message }));
  return new ApiError(err.status, err.code, issues.map((i) => `${i.path}: ${i.message}`).join("; "), {}, issues);
}

/**
 * Where a new job goes: a catalog job, to the shard its id hashes to; a job its shard alone holds
 * (`held`), to `shard` if given (a callback's, beside its message) or to one drawn at random,
 * named in its id (newStandaloneJobId); or the `id` chosen before (a deduplicated message's,
 * reserved with its id: publish.ts), which names its shard.
 */
type Placement = { held: false } | { held: true; shard?: string | undefined; id?: string | undefined };

function newIdAndShard(place: Placement, shardCount: number, now: number): { id: string; shard: string } {
  if (!place.held) {
    const id = newJobId(now);
    return { id, shard: shardFor(id, shardCount) };
  }
  const id = place.id ?? standaloneJobId(place.shard, shardCount, now);
  return { id, shard: shardNamedBy(id)! };
}

/** A new standalone job's id: in `shard` if it can be named in an id, else in one drawn at random. */
export function standaloneJobId(shard: string | undefined, shardCount: number, now: number): string {
  const asked = shard === undefined ? null : shardNumber(shard);
  const number =
    asked !== null && asked < MAX_NAMED_SHARDS
      ? asked
      : crypto.getRandomValues(new Uint32Array(1))[0]! % Math.min(shardCount, MAX_NAMED_SHARDS);
  return newStandaloneJobId(now, number);
}

/** A new job as the catalog will hold it: checked, its target sealed, its id and shard chosen. */
async function acceptJob(
  env: Env,
  tenantId: string,
  jobPrefix: string | null,
  input: CreateJob,
  now: number,
  place: Placement,
): Promise<CatalogJob> {
  const { name, target, steps, ...fields } = input;
  const { id, shard } = newIdAndShard(place, config(env).shardCount, now);
  const job: CatalogJob = {
    id,
    tenantId,
    name: name ?? null,
    shard,
    version: 1,
    spec: {
      ...fields,
      schedule: canonicalSchedule(fields.schedule, now),
      // The schema let exactly one of them through.
      ...(target && { target: await acceptTarget(env, target, id) }),
      ...(steps && { steps: await acceptSteps(env, steps, id) }),
      ...(fields.notify && { notify: await acceptNotify(env, fields.notify, tenantId) }),
    },
    paused: false,
    pausedReason: null,
    createdAt: now,
    updatedAt: now,
    deletedAt: null,
  };
  const setter = { jobPrefix, fields: CHAIN_FIELDS };
  await checkChains(env.DB, job, job.spec, setter);
  return { ...job, spec: recordChainPrefixes(job.spec, setter) };
}

/**
 * Standalone jobs (QStash messages) go to their shards and nowhere else: the shards are
 * registered as the tenant's first (so the sweep and the /v2 listings reach them), then each
 * shard takes its jobs in one call before the answer. The sweep never learns of these jobs, so
 * a shard that cannot take them fails the call (503, to be retried) instead of being left to it;
 * a call over several shards may then have handed some of its messages over.
 */
async function handOverStandalone(
  env: Env,
  caller: Caller,
  accepted: Accepted[],
  outcomes: BatchOutcome[],
  counted: boolean,
): Promise<BatchOutcome[]> {
  const tenant = caller.admin ? tenantOf((await getTenant(env.DB, DEFAULT_TENANT)) ?? undefined) : caller.tenant;
  const held = accepted.map((a) => ({ ...a, job: { ...a.job, standalone: true as const } }));
  // The latest of their ids' times: a recount that began in between counts them twice, never not at all.
  const madeAt = Math.max(...held.map((a) => a.job.createdAt));
  const giveBack = counted ? await reserveMessages(env, tenant, held.length, madeAt) : async () => {};
  try {
    await registerShards(
      env.DB,
      tenant.id,
      held.map((a) => a.job.shard),
    );
  } catch (err) {
    // None was handed over. (A shard that fails below may follow others that took theirs: the
    // reservation stands, on the safe side, until a recount puts it right.)
    await giveBack();
    throw err;
  }
  const runtimes = await handOver(env, tenant, held, (shard, list, err) => {
    console.error(`${list.length} message(s): shard ${shard} unreachable, refused`, err);
    throw new ApiError(503, "shard_unavailable", "a shard could not take the message; retry the request", { "Retry-After": "5" });
  });
  for (const { index, job } of held) outcomes[index] = { index, state: { job, runtime: runtimes.get(job.id) } };
  return outcomes;
}

/** New jobs a shard could not be reached for: their runtimes as the answer shows them, or a refusal thrown. */
type Unreachable = (shard: string, jobs: CatalogJob[], err: unknown) => JobRuntime[];

/**
 * A catalog job's shard that cannot be reached gets it from the sweep; its first fire is the
 * same pure function the shard uses, so the answer stays true.
 */
const leftToSweep =
  (now: number): Unreachable =>
  (shard, jobs, err) => {
    console.error(`${jobs.length} new job(s): shard ${shard} unreachable, left to the sweep`, err);
    return jobs.map((j) => ({ id: j.id, version: 1, nextRunAt: firstFire(j.spec.schedule, now), completed: false }));
  };

/** Hands new jobs to their shards, one call per shard. */
async function handOver(env: Env, tenant: Tenant, accepted: Accepted[], unreachable: Unreachable): Promise<Map<string, JobRuntime>> {
  const settings = [settingsOf(tenant)];
  const answers = await Promise.all(
    [...Map.groupBy(jobsOf(accepted), (j) => j.shard)].map(async ([shard, list]) => {
      try {
        return await shardStub(env, shard).applyJobs(list.map(toDefinition), settings);
      } catch (err) {
        return unreachable(shard, list, err);
      }
    }),
  );
  return new Map(answers.flat().map((r) => [r.id, r]));
}
