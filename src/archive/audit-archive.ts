import type { AuditEntry } from "../catalog/audit";

/**
 * The audit log's archive in R2, beside the run archive: entries older than their retention
 * leave D1 for here. Layout (version 1): `audit/v1/<tenant>/<YYYY>/<MM>/<DD>/<pass>-<first id>.ndjson.gz`,
 * the date (UTC) being the entries' own; gzip-compressed NDJSON, one entry per line, as
 * GET /v1/audit answered it (its `at` in epoch ms). A pass repeated after a crash writes the
 * same entries again under another pass: readers keep one per id.
 */

const DAY_MS = 86_400_000;
const pad = (n: number) => String(n).padStart(2, "0");

export function auditArchiveKey(tenantId: string, at: number, passAt: number, firstId: string): string {
  const d = new Date(at);
  return `audit/v1/${tenantId}/${d.getUTCFullYear()}/${pad(d.getUTCMonth() + 1)}/${pad(d.getUTCDate())}/${passAt}-${firstId}.ndjson.gz`;
}

/** Writes entries, one object per day they fall in. */
export async function writeAuditArchive(bucket: R2Bucket, tenantId: string, entries: AuditEntry[], passAt: number): Promise<void> {
  const byDay = Map.groupBy(entries, (e) => Math.floor(e.at / DAY_MS));
  await Promise.all(
    [...byDay.values()].map(async (group) => {
      const ndjson = `${group.map((e) => JSON.stringify(e)).join("\n")}\n`;
      const gzipped = await new Response(new Blob([ndjson]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer();
      await bucket.put(auditArchiveKey(tenantId, group[0]!.at, passAt, group[0]!.id), gzipped, {
        httpMetadata: { contentType: "application/x-ndjson", contentEncoding: "gzip" },
      });
    }),
  );
}
