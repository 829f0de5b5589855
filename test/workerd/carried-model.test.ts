import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { armFault, disarmFaults } from "../../src/faults";
import type { JobDefinition } from "../../src/protocol/stored-rows";
import type { Shard } from "../../src/shard/shard";
import { entriesAhead, makeDue, rows, unwatchedRuns } from "./entries";
import { definition, receiverPath, specLike } from "./helpers";

/**
 * Recurring jobs whose runs carry their next fire (src/shard/fired-through.ts), one of them
 * with `maxRuns`, driven through random sequences of fires (some with their dispatch held
 * back), triggers, changes, new schedules, pauses, resumes, restarts and retention passes. After
 * every step: each live job not completed has an entry after the alarm's position, the newest
 * of which is the next fire the job reads (or it would never fire again, or read wrong); no job
 * fired more than its `maxRuns`; and no dispatched or running run is left with nobody to look at
 * it.
 */

type Action =
  | { kind: "fire"; job: number; held: boolean }
  | { kind: "change" | "reschedule" | "pause" | "trigger"; job: number }
  | { kind: "restart" }
  | { kind: "retention" };

const JOBS = 3;
/** The last job's: small enough that sequences reach it. */
const MAX_RUNS = 3;
const DAY = 86_400_000;

const action: fc.Arbitrary<Action> = fc.oneof(
  { arbitrary: fc.record({ kind: fc.constant("fire" as const), job: fc.nat(JOBS - 1), held: fc.boolean() }), weight: 4 },
  fc.record({
    kind: fc.constantFrom("change" as const, "reschedule" as const, "pause" as const, "trigger" as const),
    job: fc.nat(JOBS - 1),
  }),
  fc.constant({ kind: "restart" as const }),
  fc.constant({ kind: "retention" as const }),
);

async function step(shard: DurableObjectStub<Shard>, name: string, jobs: JobDefinition[], a: Action): Promise<void> {
  if (a.kind === "restart") return evictDurableObject(shard);
  if (a.kind === "retention") {
    // Finished runs made a month old, then a retention pass: only runs whose entries are no longer needed may go.
    await rows(shard, "UPDATE runs SET scheduled_at = scheduled_at - 30 * ? WHERE finished_at IS NOT NULL", DAY);
    await runInDurableObject(shard, async (_s: Shard, state) => {
      state.storage.sql.exec("UPDATE meta SET value = ? WHERE key = 'retention_next_at'", String(Date.now() - 1));
      await state.storage.setAlarm(Date.now());
    });
    await runDurableObjectAlarm(shard);
    return;
  }
  const job = jobs[a.job]!;
  if (a.kind === "trigger") {
    if (!job.paused) await shard.trigger(job.id, { triggerKey: crypto.randomUUID() });
    return;
  }
  if (a.kind === "fire") {
    if (job.paused || !(await makeDue(shard, [job.id], Date.now() - 1))[0]) return;
    if (a.held) armFault("shard.queueSend", Infinity, name); // the dispatch waits in memory: a restart loses it
    await runDurableObjectAlarm(shard);
    disarmFaults();
    return;
  }
  const changed: JobDefinition =
    a.kind === "pause"
      ? { ...job, version: job.version + 1, paused: !job.paused }
      : a.kind === "change"
        ? { ...job, version: job.version + 1, spec: { ...job.spec, timeoutMs: job.spec.timeoutMs === 20_000 ? 30_000 : 20_000 } }
        : {
            ...job,
            version: job.version + 1,
            spec: { ...job.spec, schedule: { ...job.spec.schedule, every: job.spec.schedule.every === "1h" ? "2h" : "1h" } },
          };
  jobs[a.job] = changed;
  await shard.applyJobs([changed]);
}

async function check(shard: DurableObjectStub<Shard>, jobs: JobDefinition[], after: string): Promise<void> {
  const { unwatched } = await unwatchedRuns(shard);
  expect(unwatched, after).toEqual([]);
  const ahead = new Map((await entriesAhead(shard)).map((e) => [e.jobId, e.fires]));
  const runtimes = new Map((await shard.jobRuntimes(jobs.map((j) => j.id))).map((r) => [r.id, r]));
  for (const [i, job] of jobs.entries()) {
    const { nextRunAt, completed } = runtimes.get(job.id)!;
    const scheduled = await rows(shard, "SELECT COUNT(*) AS n FROM runs WHERE job_id = ? AND trigger = 'schedule'", job.id);
    expect(Number(scheduled[0]!.n), `${after}: job ${i} within its maxRuns`).toBeLessThanOrEqual(job.spec.schedule.maxRuns ?? Infinity);
    const fires = ahead.get(job.id) ?? [];
    // A completed job may still have entries after a position that a restart took back: the
    // alarm reads them again and passes them, or fires them to no effect (their runs exist).
    if (job.paused || completed) {
      expect(nextRunAt, `${after}: job ${i} is paused or completed`).toBeNull();
      continue;
    }
    expect(fires.length, `${after}: job ${i} has an entry after the alarm's position`).toBeGreaterThan(0);
    expect(nextRunAt, `${after}: job ${i} reads its newest entry`).toBe(Math.max(...fires));
  }
}

describe("a recurring job's entries through any sequence of fires, changes, restarts and retention", () => {
  afterEach(() => disarmFaults());

  it("every live job keeps an entry after the alarm's position, reads its newest, and leaves no open run unwatched", {
    timeout: 240_000,
  }, async () => {
    // Runs take 1.5 s, so that some are open at the checks.
    const spec = await specLike({ every: "1h" }, receiverPath("carried-model", "delayMs=1500"));
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 4, maxLength: 16 }), async (actions) => {
        const name = `shard-model-${crypto.randomUUID()}`;
        const shard = env.SHARD.get(env.SHARD.idFromName(name));
        const jobs = Array.from({ length: JOBS }, (_, i) =>
          definition(
            { ...spec, retention: { days: 1 }, schedule: i === JOBS - 1 ? { every: "1h", maxRuns: MAX_RUNS } : { every: "1h" } },
            Date.now(),
          ),
        );
        await shard.applyJobs(jobs);
        for (const [i, a] of actions.entries()) {
          await step(shard, name, jobs, a);
          await check(shard, jobs, `after step ${i} (${JSON.stringify(a)}) of ${JSON.stringify(actions)}`);
        }
        disarmFaults();
        await shard.applyJobs(jobs.map((j) => ({ ...j, version: j.version + 1, deleted: true })));
      }),
      { numRuns: 40 },
    );
  });
});
