import type { EdgecronClient, Job } from "edgecron/client";
import { EdgecronError, everyItem } from "edgecron/client";

/** The tenant the admin token's jobs are created in (src/model/ids.ts, DEFAULT_TENANT). */
const ADMIN_TENANT = "default";

/**
 * The jobs an apply manages: the caller's tenant's. A tenant key lists only its own; the admin
 * token lists every tenant's, but creates in `default`, so for it apply keeps to `default` and
 * never touches (or prunes) another tenant's jobs. Only the admin may list tenants: that tells
 * the two apart.
 */
export async function managedJobs(client: EdgecronClient): Promise<Job[]> {
  const probe = await client.api.GET("/v1/tenants", { params: { query: { limit: 1 } } });
  if (probe.response.status !== 200 && probe.response.status !== 403) {
    throw new EdgecronError(probe.response.status, `http_${probe.response.status}`, "could not tell the admin token from a tenant key");
  }
  const admin = probe.response.status === 200;
  const jobs: Job[] = [];
  for await (const job of everyItem((cursor) => client.jobs.list({ limit: 200, cursor }))) {
    if (!admin || job.tenantId === ADMIN_TENANT) jobs.push(job);
  }
  // A key without the write scope is shown targets by their origin and bodies by their hash
  // (docs/security.md, "What each scope sees"): compared with the file, every one would differ.
  if (jobs.some(shownReduced)) {
    throw new EdgecronError(
      403,
      "insufficient_scope",
      "this key is shown targets reduced (it lacks the write scope): apply, --dry-run too, needs a write key",
    );
  }
  return jobs;
}

/** Is any of a job's sealed parts shown reduced, as to a read key? */
export const shownReduced = (job: Job): boolean =>
  job.target?.reduced === true || job.notify?.reduced === true || (job.steps ?? []).some((s) => s.target.reduced === true);
