import { ApiError } from "../api/errors";
import type { CatalogJob } from "../catalog/jobs";

/**
 * A job's entity tag is its version: every change bumps it (src/catalog/jobs.ts), so two
 * answers with the same tag show the same definition. Clients send it back in `If-Match` to
 * change a job only as they last saw it (RFC 9110, 13.1.1).
 */
export const etagOf = (job: Pick<CatalogJob, "version">): string => `"v${job.version}"`;

/** `*`, or a list of entity tags (weak ones allowed in the syntax; they never match, as If-Match compares strongly). */
export const IF_MATCH = /^\s*(\*|(W\/)?"[\x21\x23-\x7e]*"(\s*,\s*(W\/)?"[\x21\x23-\x7e]*")*)\s*$/;

/** 412 unless `ifMatch` (absent: no condition) names the job's current tag. */
export function checkIfMatch(job: CatalogJob, ifMatch: string | undefined): void {
  if (ifMatch === undefined || ifMatch.trim() === "*") return;
  const tags = ifMatch.split(",").map((t) => t.trim());
  if (tags.includes(etagOf(job))) return;
  throw new ApiError(
    412,
    "precondition_failed",
    `the job changed since that ETag: it is at version ${job.version} (ETag ${etagOf(job)}); read it again and retry`,
    { ETag: etagOf(job) },
  );
}
