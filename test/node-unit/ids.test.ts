import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { runCursor } from "../../src/app/pagination";
import { PageQuery } from "../../src/model/common";
import {
  chainDepthOf,
  chainedFromOf,
  chainedRunId,
  fnv1a32,
  JOB_ID,
  jobIdOfRun,
  MAX_NAMED_SHARDS,
  MAX_RUN_ID_LENGTH,
  newJobId,
  newStandaloneJobId,
  runKeyRange,
  scheduledRunId,
  shardFor,
  shardNamedBy,
  shardNumber,
  stepKeyRange,
  stepOfRun,
  stepRunId,
  triggeredRunId,
} from "../../src/model/ids";
import { MAX_CHAIN_DEPTH } from "../../src/model/job";
import type { RunView } from "../../src/protocol/shard-rpc";

describe("ids", () => {
  it("job ids are well formed and sort by creation", () => {
    const a = newJobId(1_700_000_000_000);
    const b = newJobId(1_700_000_000_001);
    expect(a).toMatch(JOB_ID);
    expect(a < b).toBe(true);
  });

  it("run ids are a function of (job, instant) and lead back to the job", () => {
    // Stored ids, so fixed for good: the job's part, then the instant in base 36
    // (1_700_000_000_000 is "loyw3v28", worked out apart from the code) or `m-` and the key.
    expect(scheduledRunId("job_0mx34t9ichmazsj5l8v", 1_700_000_000_000)).toBe("run_0mx34t9ichmazsj5l8v_loyw3v28");
    expect(scheduledRunId("job_0mx34t9ichmazsj5l8v", 0)).toBe("run_0mx34t9ichmazsj5l8v_0");
    expect(triggeredRunId("job_0mx34t9ichmazsj5l8v", "deploy-42")).toBe("run_0mx34t9ichmazsj5l8v_m-deploy-42");
    const instant = fc.integer({ min: 0, max: 2 ** 45 });
    fc.assert(
      fc.property(instant, instant, instant, (created, at, other) => {
        const job = newJobId(created);
        // One run per instant: two instants share an id only when they are the same instant.
        expect(scheduledRunId(job, at) === scheduledRunId(job, other)).toBe(at === other);
        expect(scheduledRunId(job, at) === scheduledRunId(job, at + 1)).toBe(false);
        expect(jobIdOfRun(scheduledRunId(job, at))).toBe(job);
        expect(jobIdOfRun(triggeredRunId(job, "deploy-42"))).toBe(job);
      }),
    );
    const job = newJobId(0);
    expect(scheduledRunId(job, 1_000)).not.toBe(scheduledRunId(job, 1_001));
    expect(triggeredRunId(job, "a")).not.toBe(scheduledRunId(job, 1_000));
  });

  it("no trigger key names a scheduled run, so a client's key can never take a fire's run", () => {
    const job = newJobId(0);
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 45 }), fc.stringMatching(/^[0-9A-Za-z-]{1,64}$/), (at, key) => {
        const scheduled = scheduledRunId(job, at);
        expect(triggeredRunId(job, key)).not.toBe(scheduled);
        // The key that would spell the fire's id after a manual run's prefix, as a client could send it.
        const suffix = scheduled.slice(scheduled.lastIndexOf("_") + 2);
        if (suffix.length > 0) expect(triggeredRunId(job, suffix)).not.toBe(scheduled);
      }),
    );
    // Today's instants are 8 base-36 digits starting with "m": the key "ihx2k3f" once named one.
    expect(triggeredRunId(job, "ihx2k3f")).not.toBe(scheduledRunId(job, Number.parseInt("mihx2k3f", 36)));
  });

  it("a workflow step's run id leads back to its job and its run, and stays in both key ranges", () => {
    const step = fc.stringMatching(/^[A-Za-z0-9_-]{1,64}$/);
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 45 }), fc.integer({ min: 0, max: 2 ** 45 }), step, (created, at, stepId) => {
        const job = newJobId(created);
        for (const run of [scheduledRunId(job, at), triggeredRunId(job, "deploy-42")]) {
          const id = stepRunId(run, stepId);
          expect(jobIdOfRun(id)).toBe(job);
          expect(stepOfRun(id)).toEqual({ runId: run, stepId });
          expect(stepOfRun(run)).toBeNull();
          const [from, to] = runKeyRange(job);
          expect(id > from && id < to).toBe(true);
          const [sFrom, sTo] = stepKeyRange(run);
          expect(id > sFrom && id < sTo).toBe(true);
          // Another run's steps are outside this run's range, even one whose id starts with this one's.
          const other = stepRunId(`${run}0`, stepId);
          expect(other > sFrom && other < sTo).toBe(false);
        }
      }),
    );
  });

  it("a chained run's id is its job's, names the run that ended, and is no other kind of run's", () => {
    const key = fc.stringMatching(/^[0-9A-Za-z-]{1,64}$/);
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 4_000_000_000_000 }), fc.integer({ min: 0, max: 4_000_000_000_000 }), key, (t1, t2, k) => {
        const [target, source] = [newJobId(t1), newJobId(t2)];
        for (const from of [scheduledRunId(source, t2), triggeredRunId(source, k)]) {
          const id = chainedRunId(target, from);
          expect(jobIdOfRun(id)).toBe(target);
          expect(chainedFromOf(id)).toBe(from);
          const [lo, hi] = runKeyRange(target);
          expect(id >= lo && id < hi).toBe(true);
          expect(stepOfRun(id)).toBeNull();
          // Neither a scheduled run nor a manual one of the job can have this id.
          expect(id).not.toBe(scheduledRunId(target, t1));
          expect(id).not.toBe(triggeredRunId(target, k));
        }
        expect(chainedFromOf(scheduledRunId(target, t1))).toBeNull();
        expect(chainedFromOf(triggeredRunId(target, k))).toBeNull();
      }),
    );
    expect(() => chainedRunId(newJobId(0), stepRunId(scheduledRunId(newJobId(0), 0), "a"))).toThrow(/not a run id/);
  });

  it("a chained run's depth counts the hops back to the run that began its chain", () => {
    const key = fc.stringMatching(/^[0-9A-Za-z-]{1,64}$/);
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 4_000_000_000_000 }), { minLength: 1, maxLength: 30 }),
        fc.boolean(),
        key,
        (times, manual, k) => {
          // A chain through jobs that may repeat (a loop), begun by a scheduled or a manual run.
          const jobs = times.map((t) => newJobId(t));
          let id = manual ? triggeredRunId(jobs[0]!, k) : scheduledRunId(jobs[0]!, times[0]!);
          expect(chainDepthOf(id)).toBe(0);
          for (const [hop, job] of jobs.slice(1).entries()) {
            id = chainedRunId(job, id);
            expect(chainDepthOf(id)).toBe(hop + 1);
          }
        },
      ),
    );
  });

  it("the longest run id a chain can make is one the API takes, as a path id and in a page's cursor", () => {
    const jobs = Array.from({ length: MAX_CHAIN_DEPTH + 1 }, (_, i) => newJobId(4_000_000_000_000 - i));
    let id = triggeredRunId(jobs[0]!, "k".repeat(64));
    for (const job of jobs.slice(1)) id = chainedRunId(job, id);
    expect(chainDepthOf(id)).toBe(MAX_CHAIN_DEPTH);
    const step = stepRunId(id, "s".repeat(64));
    expect(step.length).toBeLessThanOrEqual(MAX_RUN_ID_LENGTH);
    const cursor = runCursor.encode({ id, scheduledAt: 4_000_000_000_000 } as RunView);
    expect(runCursor.decode(cursor)).toEqual({ id, scheduledAt: 4_000_000_000_000 });
    expect(PageQuery.safeParse({ cursor }).success).toBe(true);
  });

  it("FNV-1a 32 gives the values the FNV reference publishes", () => {
    expect(fnv1a32("")).toBe(0x811c9dc5); // the offset basis: nothing hashed
    expect(fnv1a32("a")).toBe(0xe40c292c);
    expect(fnv1a32("foobar")).toBe(0xbf9cf968);
  });

  it("the shard of a job never changes (pinned values) and spreads jobs evenly", () => {
    // FNV-1a 32 of the id modulo the shard count, computed independently.
    expect(shardFor("job_0mx34t9ichmazsj5l8v", 16)).toBe("shard-0");
    expect(shardFor("job_000000000aaaaaaaaaa", 16)).toBe("shard-5");
    expect(shardFor("job_000000000bbbbbbbbbb", 16)).toBe("shard-11");
    const counts = new Map<string, number>();
    for (let i = 0; i < 16_000; i++) {
      const s = shardFor(newJobId(1_700_000_000_000 + i), 16);
      counts.set(s, (counts.get(s) ?? 0) + 1);
    }
    expect(counts.size).toBe(16);
    for (const n of counts.values()) expect(n).toBeGreaterThan(700);
  });

  it("a standalone job's id names its shard, whatever the shard count; it is a job id of its instant", () => {
    const at = 1_700_000_000_000;
    fc.assert(
      fc.property(fc.integer({ min: 0, max: MAX_NAMED_SHARDS - 1 }), (n) => {
        const id = newStandaloneJobId(at, n);
        expect(id).toMatch(JOB_ID);
        expect(id.slice(0, 13)).toBe(newJobId(at).slice(0, 13));
        expect(shardNamedBy(id)).toBe(`shard-${n}`);
        expect(shardNumber(shardNamedBy(id)!)).toBe(n);
      }),
      { numRuns: 500 },
    );
    // Pinned: the last three characters in base 36, "l8v" = (21 × 36 + 8) × 36 + 31.
    expect(shardNamedBy("job_0mx34t9ichmazsj5l8v")).toBe("shard-27535");
    expect(() => newStandaloneJobId(at, MAX_NAMED_SHARDS)).toThrow(RangeError);
    expect(shardNamedBy("job_x")).toBeNull();
    expect(shardNumber("shard-900001")).toBe(900_001);
    expect(shardNumber("queue-1")).toBeNull();
  });
});
