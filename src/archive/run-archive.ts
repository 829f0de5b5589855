import { failpoint, hangpoint } from "../faults";
import type { AttemptRow, RunRow } from "../protocol/stored-rows";

/**
 * The run archive in R2: the tiered storage for history that has left its shard.
 *
 * Layout (version 1): `runs/v1/<shard>/<YYYY>/<MM>/<DD>/<HH>/<pass>-<first run id>.ndjson.gz`,
 * the date and hour (UTC) being the runs' scheduled instant. Each object is gzip-compressed
 * NDJSON, one archived run per line (the run as its shard kept it, its shard's name, and its
 * attempts without their completion tokens). A retention pass writes one object per hour its
 * runs fall in; a pass repeated after a crash writes the same runs again under another pass,
 * so readers keep one copy per run id.
 */
export type ArchivedRun = RunRow & { shard: string; attemptLog: Array<Omit<AttemptRow, "completionToken">> };

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

const pad = (n: number) => String(n).padStart(2, "0");

/** The key prefix of a shard's runs scheduled in the hour (or, without `hour`, the day) of `at`. */
function archivePrefix(shard: string, at: number, unit: "hour" | "day"): string {
  const d = new Date(at);
  const day = `runs/v1/${shard}/${d.getUTCFullYear()}/${pad(d.getUTCMonth() + 1)}/${pad(d.getUTCDate())}/`;
  return unit === "day" ? day : `${day}${pad(d.getUTCHours())}/`;
}

/** Writes a pass's runs, one object per scheduled hour. */
export async function writeArchive(bucket: R2Bucket, shard: string, runs: ArchivedRun[], passAt: number): Promise<void> {
  failpoint("archive.write", shard);
  // Hung as a real subrequest hangs: pending on I/O (a timer), which workerd does not cut short.
  if (hangpoint("archive.hang", shard)) return new Promise((resolve) => setTimeout(resolve, 60_000));
  const byHour = Map.groupBy(runs, (r) => Math.floor(r.scheduledAt / HOUR_MS));
  await Promise.all(
    [...byHour.values()].map(async (group) => {
      const key = `${archivePrefix(shard, group[0]!.scheduledAt, "hour")}${passAt}-${group[0]!.id}.ndjson.gz`;
      const ndjson = `${group.map((r) => JSON.stringify(r)).join("\n")}\n`;
      const gzipped = await new Response(new Blob([ndjson]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer();
      await bucket.put(key, gzipped, { httpMetadata: { contentType: "application/x-ndjson", contentEncoding: "gzip" } });
    }),
  );
}

/**
 * A job's archived runs scheduled in [from, to], oldest first, one per run id. Lists the
 * shard's objects a day at a time and opens only the hours in range.
 */
export async function readArchive(bucket: R2Bucket, shard: string, jobId: string, from: number, to: number): Promise<ArchivedRun[]> {
  const found = new Map<string, ArchivedRun>();
  for (let day = Math.floor(from / DAY_MS) * DAY_MS; day <= to; day += DAY_MS) {
    const prefix = archivePrefix(shard, day, "day");
    for (let cursor: string | undefined; ; ) {
      const listed = await bucket.list({ prefix, cursor });
      const inRange = listed.objects.filter((o) => {
        const hour = Number(o.key.slice(prefix.length, prefix.length + 2));
        const start = day + hour * HOUR_MS;
        return start + HOUR_MS > from && start <= to;
      });
      for (const object of inRange) {
        const body = await bucket.get(object.key);
        if (!body) continue;
        const text = await new Response(body.body.pipeThrough(new DecompressionStream("gzip"))).text();
        for (const line of text.split("\n")) {
          if (line === "") continue;
          const run = JSON.parse(line) as ArchivedRun;
          if (run.jobId === jobId && run.scheduledAt >= from && run.scheduledAt <= to) found.set(run.id, run);
        }
      }
      if (!listed.truncated) break;
      cursor = listed.cursor;
    }
  }
  return [...found.values()].sort((a, b) => a.scheduledAt - b.scheduledAt || (a.id < b.id ? -1 : 1));
}
