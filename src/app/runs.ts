import { ApiError, notFound } from "../api/errors";
import { answered } from "../api/refusals";
import type { CatalogJob } from "../catalog/jobs";
import { shardsInUse } from "../catalog/shards";
import { jobIdOfRun } from "../model/ids";
import type { Completion, RunView } from "../protocol/shard-rpc";
import { verifyCompletionToken } from "../security/completion-tokens";
import { shardStub } from "../stubs";
import { entryOf, recordAfter } from "./audit";
import { type Caller, scopeOf } from "./caller";
import { loadJob } from "./jobs";
import { deadLetterCursor, type Page, paged, runCursor } from "./pagination";
import { loadAnyJob } from "./standalone-jobs";

/** The job a run belongs to (deleted jobs included: their runs stay readable; a message's, from its shard), or 404. */
async function jobOfRun(env: Env, caller: Caller, runId: string): Promise<CatalogJob> {
  const jobId = jobIdOfRun(runId);
  if (!jobId) throw notFound("run", runId);
  return loadAnyJob(env, caller, jobId, { includeDeleted: true }).catch((err: unknown) => {
    // Only "no such job" becomes "no such run"; anything else (D1 down: 503) stays what it is.
    throw err instanceof ApiError && err.status === 404 ? notFound("run", runId) : err;
  });
}

export async function getRun(env: Env, caller: Caller, id: string): Promise<RunView> {
  const job = await jobOfRun(env, caller, id);
  const run = await shardStub(env, job.shard).getRun(id);
  if (!run) throw notFound("run", id);
  return run;
}

export async function retryRun(env: Env, caller: Caller, id: string): Promise<RunView> {
  const job = await jobOfRun(env, caller, id);
  const run = answered(await shardStub(env, job.shard).retryRun(id), { call: "retry", id });
  await recordAfter(env.DB, entryOf(caller, { tenantId: job.tenantId, action: "run.retry", subject: id, after: { state: run.state } }));
  return run;
}

/** A job's runs, newest first; a deleted job's included. */
export async function listRuns(env: Env, caller: Caller, jobId: string, query: { limit: number; cursor?: string }): Promise<Page<RunView>> {
  const job = await loadJob(env, caller, jobId, { includeDeleted: true });
  return paged(runCursor, query, (limit, before) => shardStub(env, job.shard).listRuns(job.id, limit, before));
}

// ---- long-running targets: authenticated by the completion token, not an API key ----

/**
 * The token names the shard that issued it, so no catalog read is needed to find the run; its
 * MAC is checked first, so a forged token reaches no shard (src/security/completion-tokens.ts).
 */
async function verifiedToken(env: Env, presented: string): Promise<{ token: string; shard: string }> {
  const verified = await verifyCompletionToken(env.SIGNING_SECRET, presented);
  if (!verified) throw new ApiError(403, "invalid_token", "not a completion token edgecron issued");
  return verified;
}

export async function completeRun(env: Env, id: string, presented: string, completion: Completion): Promise<RunView> {
  const { token, shard } = await verifiedToken(env, presented);
  return answered(await shardStub(env, shard).complete(id, token, completion), { call: "complete", id });
}

export async function heartbeat(env: Env, id: string, presented: string, extendMs: number): Promise<{ leaseUntil: number }> {
  const { token, shard } = await verifiedToken(env, presented);
  return answered(await shardStub(env, shard).heartbeat(id, token, extendMs), { call: "heartbeat", id });
}

// ---- dead letters ----

/** Runs that ended without success, newest first, across the shards of the caller's jobs (or of one job). */
export async function deadLetters(
  env: Env,
  caller: Caller,
  query: { limit: number; cursor?: string; jobId?: string },
): Promise<Page<RunView>> {
  const { jobId } = query;
  return paged(deadLetterCursor, query, async (limit, before) => {
    const tenantId = scopeOf(caller);
    const shards = jobId ? [(await loadJob(env, caller, jobId, { includeDeleted: true })).shard] : await shardsInUse(env.DB, tenantId);
    // `limit` is one more than the page: each shard returns its newest `limit`; merged, the
    // newest `limit` overall are among them.
    const scope = { tenantId, jobId: jobId ?? null };
    const pages = await Promise.all(shards.map((s) => shardStub(env, s).deadLetters(scope, limit, before)));
    return pages.flat().sort(newestFailureFirst);
  });
}

function newestFailureFirst(a: RunView, b: RunView): number {
  return b.finishedAt! - a.finishedAt! || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
}
