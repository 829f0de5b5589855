import { ApiError } from "../api/errors";
import { type ArchivedRun, readArchive } from "../archive/run-archive";
import type { Caller } from "./caller";
import { loadJob } from "./jobs";

/** One history request reads at most this span of the archive: a month of hours at most. */
export const MAX_HISTORY_SPAN_MS = 31 * 86_400_000;

/** A job's runs that retention moved to the archive, scheduled in [from, to] (deleted jobs included). */
export async function jobHistory(env: Env, caller: Caller, jobId: string, from: number, to: number): Promise<ArchivedRun[]> {
  const job = await loadJob(env, caller, jobId, { includeDeleted: true });
  const bucket = (env as Partial<Env>).ARCHIVE;
  if (!bucket) throw new ApiError(404, "no_archive", "this deployment has no archive bucket: expired history was deleted, not archived");
  return readArchive(bucket, job.shard, job.id, from, to);
}
