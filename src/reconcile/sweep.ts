import { getJobsByIds, shardEntries, shardsInUse, toDefinition } from "../catalog/jobs";
import { tenantsOfShard } from "../catalog/tenants";
import { shardStub, type Env } from "../env";

/** D1's bound-parameter limit is 100 per statement; pages stay under it. */
const PAGE = 90;

export interface SweepReport {
  shards: number;
  jobsCompared: number;
  jobsRepaired: number;
  shardsThatRanDueWork: number;
}

/**
 * The reconciliation sweep (the cron trigger): every shard receives the catalog's jobs it
 * lacks or holds at an older version (a crash between the D1 write and the shard call loses
 * nothing) and its tenants' current settings (a rotation or limit change it missed), and every
 * shard re-asserts its alarm (alarms can be lost or late).
 */
export async function sweep(env: Env): Promise<SweepReport> {
  // Every shard that ever held a job; a shard never handed one has nothing to do.
  const shards = await shardsInUse(env.DB);
  const report: SweepReport = { shards: shards.length, jobsCompared: 0, jobsRepaired: 0, shardsThatRanDueWork: 0 };
  await Promise.all(
    shards.map(async (shard) => {
      const stub = shardStub(env, shard);
      await stub.applyTenants(shard, await tenantsOfShard(env.DB, shard));
      for (let after = ""; ; ) {
        const entries = await shardEntries(env.DB, shard, after, PAGE);
        if (entries.length === 0) break;
        report.jobsCompared += entries.length;
        const stale = await stub.staleJobs(shard, entries);
        if (stale.length > 0) {
          const jobs = await getJobsByIds(env.DB, stale);
          await stub.applyJobs(shard, jobs.map(toDefinition));
          report.jobsRepaired += jobs.length;
        }
        after = entries[entries.length - 1]!.id;
      }
      const { ranDueWork } = await stub.assertAlarm();
      if (ranDueWork) report.shardsThatRanDueWork++;
    }),
  );
  return report;
}
