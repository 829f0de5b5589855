import { getJobsByIds, jobsWithUnsealedTargets, replaceSpec, shardEntries, shardsInUse, toDefinition } from "../catalog/jobs";
import { tenantsOfShard } from "../catalog/tenants";
import type { Target } from "../model/job";
import { sealTarget } from "../security/targets";
import { MAX_BOUND_PARAMETERS } from "../sql";
import { shardStub } from "../stubs";

/** Catalog entries compared per shard call: a page's stale ids are read back in one statement. */
const PAGE = MAX_BOUND_PARAMETERS;

export interface SweepReport {
  shards: number;
  jobsCompared: number;
  jobsRepaired: number;
  shardsThatRanDueWork: number;
  targetsSealed: number;
}

/** Targets sealed per sweep, so that an upgrade spreads over a few minutes instead of one long sweep. */
const SEAL_PER_SWEEP = 500;

/**
 * The reconciliation sweep (the cron trigger): every shard receives the catalog's jobs it
 * lacks or holds at an older version (a crash between the D1 write and the shard call loses
 * nothing) and its tenants' current settings (a rotation or limit change it missed), and every
 * shard re-asserts its alarm (alarms can be lost or late).
 */
export async function sweep(env: Env): Promise<SweepReport> {
  const targetsSealed = await sealOldTargets(env);
  // Every shard that ever held a job; a shard never handed one has nothing to do.
  const shards = await shardsInUse(env.DB);
  const report: SweepReport = { shards: shards.length, jobsCompared: 0, jobsRepaired: 0, shardsThatRanDueWork: 0, targetsSealed };
  await Promise.all(
    shards.map(async (shard) => {
      const stub = shardStub(env, shard);
      await stub.applyTenants(await tenantsOfShard(env.DB, shard));
      for (let after = ""; ; ) {
        const entries = await shardEntries(env.DB, shard, after, PAGE);
        if (entries.length === 0) break;
        report.jobsCompared += entries.length;
        const stale = await stub.staleJobs(entries);
        if (stale.length > 0) {
          const jobs = await getJobsByIds(env.DB, stale);
          await stub.applyJobs(jobs.map(toDefinition));
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

/**
 * Jobs stored before targets were sealed hold headers and body in clear, in D1 and in their
 * shard. Each is sealed here at a new version, which the shard pass below then delivers.
 */
async function sealOldTargets(env: Env): Promise<number> {
  let sealed = 0;
  for (const job of await jobsWithUnsealedTargets(env.DB, SEAL_PER_SWEEP)) {
    const target = await sealTarget(env.ENCRYPTION_KEYS, job.spec.target as unknown as Target, job.id);
    if (await replaceSpec(env.DB, job, { ...job.spec, target }, Date.now())) sealed++;
  }
  return sealed;
}
