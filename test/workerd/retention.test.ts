import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { armFault, disarmFault } from "../../src/faults";
import { runKeyRange } from "../../src/model/ids";
import type { Job } from "../../src/model/job";
import type { Run } from "../../src/model/run";
import { ARCHIVE_RETRY_MAX_MS, ARCHIVE_WRITE_TIMEOUT, archiveRetryDelay, RETENTION_CHUNK } from "../../src/shard/retention";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, createTenant, FAR_CRON, listRuns, receiverPath, runRetention, shardOf, sweepFully, waitForRun } from "./helpers";

const DAY = 86_400_000;

/**
 * A seeded run's id, in the job's range of run keys as a real run's is (`run_<job>_<name>`),
 * and back: the tests name runs `run_<name>`.
 */
const fullId = (job: Job, id: string) => `${runKeyRange(job.id)[0]}${id.slice("run_".length)}`;
const shortId = (job: Job, id: string) => `run_${id.slice(runKeyRange(job.id)[0].length)}`;

/** Finished (or, with `state`, other) runs written straight into the job's shard, each with one attempt. */
async function seedRuns(job: Job, runs: Array<{ id: string; scheduledAt: number; state?: string }>): Promise<void> {
  await runInDurableObject(shardOf(job), (_s: Shard, state) => {
    for (const run of runs) {
      const final = (run.state ?? "succeeded") !== "retry_wait";
      state.storage.sql.exec(
        `INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at, finished_at, status)
         VALUES (?, ?, 1, 'schedule', ?, ?, 1, 1, ?, ?, ?, ?, 200)`,
        fullId(job, run.id),
        job.id,
        run.scheduledAt,
        run.state ?? "succeeded",
        final ? null : Date.now() + DAY,
        run.scheduledAt,
        run.scheduledAt + 10,
        final ? run.scheduledAt + 20 : null,
      );
      state.storage.sql.exec(
        `INSERT INTO attempts (run_id, attempt, fence, started_at, finished_at, outcome, status, completion_token)
         VALUES (?, 1, 1, ?, ?, 'succeeded', 200, 'secret-completion-token')`,
        fullId(job, run.id),
        run.scheduledAt + 10,
        run.scheduledAt + 20,
      );
    }
  });
}

async function runIdsInShard(job: Job): Promise<string[]> {
  return runInDurableObject(shardOf(job), (_s: Shard, state) =>
    state.storage.sql
      .exec("SELECT id FROM runs WHERE job_id = ? ORDER BY scheduled_at", job.id)
      .toArray()
      .map((r) => shortId(job, r.id as string)),
  );
}

async function history(job: Job, from: number, to: number, as: typeof api = api): Promise<Response> {
  return as(`/v1/jobs/${job.id}/history?from=${new Date(from).toISOString()}&to=${new Date(to).toISOString()}`);
}

describe("retention", () => {
  it("keeps a job's newest runs within its window; archives the rest to R2, where /history reads them back", async () => {
    const tenant = await createTenant();
    const job = await createJob(
      { schedule: FAR_CRON, target: { url: receiverPath("retention") }, retention: { days: 7, maxRuns: 3 } },
      tenant.api,
    );
    const now = Date.now();
    const recent = Array.from({ length: 6 }, (_, i) => ({ id: `run_recent_${i}`, scheduledAt: now - 3_600_000 + i * 60_000 }));
    const old = [
      { id: "run_old_0", scheduledAt: now - 8 * DAY },
      { id: "run_old_1", scheduledAt: now - 8 * DAY + 60_000 },
    ];
    const unfinished = { id: "run_unfinished", scheduledAt: now - 9 * DAY, state: "retry_wait" };
    await seedRuns(job, [...recent, ...old, unfinished]);

    await runRetention(shardOf(job));

    // The three newest stay; the other finished ones leave; an unfinished run never does.
    expect(await runIdsInShard(job)).toEqual(["run_unfinished", "run_recent_3", "run_recent_4", "run_recent_5"]);
    const removed = ["run_old_0", "run_old_1", "run_recent_0", "run_recent_1", "run_recent_2"];

    const res = await history(job, now - 10 * DAY, now, tenant.api);
    expect(res.status, await res.clone().text()).toBe(200);
    expect(res.headers.get("Content-Type")).toContain("application/x-ndjson");
    const lines = (await res.text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Run);
    expect(lines.map((r) => shortId(job, r.id))).toEqual(removed);
    expect(lines[0]).toMatchObject({ jobId: job.id, state: "succeeded", status: 200, attempts: 1 });
    expect(lines[0]!.attemptLog).toEqual([expect.objectContaining({ attempt: 1, outcome: "succeeded", status: 200 })]);

    // The archive's layout: gzipped NDJSON under runs/v1/<shard>/<date>/<hour>/, no credentials in it.
    const listed = await env.ARCHIVE.list({ prefix: `runs/v1/${job.shard}/` });
    expect(listed.objects.length).toBeGreaterThanOrEqual(2);
    for (const object of listed.objects) {
      expect(object.key).toMatch(new RegExp(`^runs/v1/${job.shard}/\\d{4}/\\d{2}/\\d{2}/\\d{2}/\\d+-run_[a-z0-9_]+\\.ndjson\\.gz$`));
      const body = await env.ARCHIVE.get(object.key);
      const text = await new Response(body!.body.pipeThrough(new DecompressionStream("gzip"))).text();
      expect(text).not.toContain("secret-completion-token");
    }

    // A narrower range reads only its hours; another tenant sees nothing; bad ranges are 400.
    const narrow = await (await history(job, now - 8 * DAY - 1, now - 8 * DAY + 30_000, tenant.api)).text();
    expect(
      narrow
        .trim()
        .split("\n")
        .map((l) => shortId(job, (JSON.parse(l) as Run).id)),
    ).toEqual(["run_old_0"]);
    const stranger = await createTenant();
    expect((await history(job, now - DAY, now, stranger.api)).status).toBe(404);
    const backwards = await history(job, now, now - DAY, tenant.api);
    expect(backwards.status).toBe(400);
    expect(await backwards.json()).toMatchObject({ error: { code: "invalid_request", issues: [{ path: "to" }] } });
    expect((await history(job, now - 40 * DAY, now, tenant.api)).status).toBe(400);
    // The runs still in the shard are where they were.
    expect((await listRuns(job.id)).map((r) => shortId(job, r.id))).toEqual([
      "run_recent_5",
      "run_recent_4",
      "run_recent_3",
      "run_unfinished",
    ]);
  });

  it(`removes a long backlog ${RETENTION_CHUNK} runs per pass, after the alarm's due fires`, async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("retention-backlog") } });
    const now = Date.now();
    const backlog = RETENTION_CHUNK * 2 + 200;
    await seedRuns(
      job,
      Array.from({ length: backlog }, (_, i) => ({ id: `run_backlog_${String(i).padStart(5, "0")}`, scheduledAt: now - 30 * DAY + i })),
    );
    // A fire falls due at the same moment: it is made before the pass takes its chunk.
    await runInDurableObject(shardOf(job), (_s: Shard, state) => {
      state.storage.sql.exec("UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1 WHERE id = ?2", now - 1, job.id);
    });
    const first = await runRetention(shardOf(job));
    const afterFirst = await runIdsInShard(job);
    expect(afterFirst.filter((id) => !id.startsWith("run_backlog_"))).toHaveLength(1); // the fire
    expect(afterFirst.length).toBeLessThan(backlog + 1);
    expect(first.nextAt).toBeLessThanOrEqual(Date.now() + 1_000); // more to do: shortly

    let last = first;
    for (let pass = 0; pass < 5 && (await runIdsInShard(job)).some((id) => id.startsWith("run_backlog_")); pass++) {
      last = await runRetention(shardOf(job));
    }
    expect((await runIdsInShard(job)).filter((id) => id.startsWith("run_backlog_"))).toEqual([]);
    expect(last.nextAt).toBeGreaterThan(Date.now() + 60_000); // done: the next pass in a while
    expect(last.cursor).toBe("");
    // Each pass archived (and removed) at most one chunk: the runs fall in one hour, so one object a pass.
    const objects = (await env.ARCHIVE.list({ prefix: `runs/v1/${job.shard}/` })).objects;
    const archived = new Set<string>();
    for (const object of objects) {
      const body = await env.ARCHIVE.get(object.key);
      const lines = (await new Response(body!.body.pipeThrough(new DecompressionStream("gzip"))).text()).trim().split("\n");
      expect(lines.length).toBeLessThanOrEqual(RETENTION_CHUNK);
      for (const line of lines) archived.add((JSON.parse(line) as { id: string }).id);
    }
    expect(objects.length).toBeGreaterThanOrEqual(3);
    expect(archived.size).toBe(backlog);
  });

  it("an archive write that never answers is given up after its timeout: the runs kept, the failure counted, the alarm free", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("retention-archive-hung") } });
    const stub = shardOf(job);
    const now = Date.now();
    const timeout = ARCHIVE_WRITE_TIMEOUT.ms;
    ARCHIVE_WRITE_TIMEOUT.ms = 200;
    // Armed before the runs are there and for every write meanwhile: a pass the shard's own alarm
    // makes in this window hangs too, instead of archiving the run before the pass driven here.
    armFault("archive.hang", Number.POSITIVE_INFINITY, job.shard);
    try {
      await seedRuns(job, [{ id: "run_hung_0", scheduledAt: now - 8 * DAY }]);
      await runRetention(stub);
    } finally {
      ARCHIVE_WRITE_TIMEOUT.ms = timeout;
      disarmFault("archive.hang", job.shard);
    }
    expect(await runIdsInShard(job)).toContain("run_hung_0");
    const { archive } = await stub.metrics(60_000);
    expect(archive).toMatchObject({ lastError: expect.stringMatching(/no answer/) });
    expect(archive.consecutiveFailures).toBeGreaterThanOrEqual(1);
    // The shard answers meanwhile, and its next pass archives and removes the run.
    await runRetention(stub);
    expect(await runIdsInShard(job)).not.toContain("run_hung_0");
  });

  it("an archive write that fails keeps the runs and backs off, doubling up to a cap; the shard goes on; metrics show it", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("retention-archive-down") } });
    const stub = shardOf(job);
    const now = Date.now();
    await seedRuns(job, [
      { id: "run_expired_0", scheduledAt: now - 8 * DAY },
      { id: "run_expired_1", scheduledAt: now - 8 * DAY + 1 },
    ]);
    // Alarm invocations, as the shard's meter counts its calls.
    const alarmsSoFar = async () => (await stub.metrics(3_600_000)).cost.byOperation.alarm?.calls ?? 0;
    const alarmsBefore = await alarmsSoFar();
    armFault("archive.write", Infinity, job.shard);
    const passes = 9;
    const waits: Array<{ failures: number; delay: number; bracketed: boolean; alarmAhead: boolean }> = [];
    try {
      for (let failures = 1; failures <= passes; failures++) {
        // The pass's clock reads between these two, so its next time is bracketed without timing anything.
        const before = Date.now();
        const { nextAt } = await runRetention(stub);
        const after = Date.now();
        const delay = archiveRetryDelay(failures);
        const alarm = await runInDurableObject(stub, (_s: Shard, state) => state.storage.getAlarm());
        waits.push({
          failures,
          delay,
          bracketed: before + delay <= nextAt && nextAt <= after + delay,
          alarmAhead: alarm !== null && alarm > after,
        });
      }
      // Responsive meanwhile: a run starts and ends as ever.
      const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
      expect(res.status).toBe(202);
      await waitForRun(((await res.json()) as Run).id, ["succeeded"]);
    } finally {
      disarmFault("archive.write", job.shard);
    }
    // 5 s, doubling, to the cap, where it stays; after each, the alarm is armed ahead, not in the past.
    expect(waits.map((w) => w.delay)).toEqual([
      5_000,
      10_000,
      20_000,
      40_000,
      80_000,
      160_000,
      320_000,
      ARCHIVE_RETRY_MAX_MS,
      ARCHIVE_RETRY_MAX_MS,
    ]);
    expect(waits.every((w) => w.bracketed && w.alarmAhead)).toBe(true);
    // One alarm per pass driven, and at most two more for the triggered run (its dispatch, its
    // lease or its permit's release can each arm one of their own on a loaded machine): a
    // failing archive never re-arms the alarm by itself, which would show here as an alarm per
    // settle, at least twice the passes.
    const alarms = (await alarmsSoFar()) - alarmsBefore;
    expect(alarms).toBeGreaterThanOrEqual(passes);
    expect(alarms).toBeLessThanOrEqual(passes + 2);
    // Nothing removed while the archive refused it.
    expect(await runIdsInShard(job)).toEqual(expect.arrayContaining(["run_expired_0", "run_expired_1"]));
    const failing = (await stub.metrics(60_000)).archive;
    expect(failing).toMatchObject({ consecutiveFailures: passes, lastError: "injected fault at archive.write" });
    expect(failing.nextRetryAt).toBeGreaterThan(Date.now());
    const overall = (await (await api("/v1/metrics")).json()) as { archive: { failingShards: number; consecutiveFailures: number } };
    expect(overall.archive.failingShards).toBeGreaterThanOrEqual(1);
    expect(overall.archive.consecutiveFailures).toBeGreaterThanOrEqual(passes);

    // The archive back: the next pass archives and removes them, and the failures are cleared.
    const { nextAt } = await runRetention(stub);
    expect(nextAt).toBeGreaterThan(Date.now() + ARCHIVE_RETRY_MAX_MS / 2); // the usual interval, not a backlog's
    expect((await runIdsInShard(job)).filter((id) => id.startsWith("run_expired_"))).toEqual([]);
    expect((await stub.metrics(60_000)).archive).toEqual({ consecutiveFailures: 0, nextRetryAt: null, lastError: null });
    const archived = await (await history(job, now - 9 * DAY, now)).text();
    expect(archived).toContain(fullId(job, "run_expired_0"));
  });

  it("a tenant's retentionDays shortens the window for its jobs; a job's own days win over it", async () => {
    const tenant = await createTenant({ retentionDays: 2 });
    const byTenant = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("retention-tenant") } }, tenant.api);
    const byJob = await createJob(
      { schedule: FAR_CRON, target: { url: receiverPath("retention-job") }, retention: { days: 5 } },
      tenant.api,
    );
    const now = Date.now();
    await seedRuns(byTenant, [{ id: "run_three_days_a", scheduledAt: now - 3 * DAY }]);
    await seedRuns(byJob, [{ id: "run_three_days_b", scheduledAt: now - 3 * DAY }]);
    await runRetention(shardOf(byTenant));
    await runRetention(shardOf(byJob));
    expect(await runIdsInShard(byTenant)).toEqual([]);
    expect(await runIdsInShard(byJob)).toEqual(["run_three_days_b"]);
    const shown = await (await tenant.api(`/v1/tenants/${tenant.id}`)).json();
    expect(shown).toMatchObject({ limits: { retentionDays: 2 } });
  });

  it("a deleted job leaves its shard once its runs have gone", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("retention-deleted") } });
    const now = Date.now();
    await seedRuns(job, [{ id: "run_gone_0", scheduledAt: now - 20 * DAY }]);
    expect((await api(`/v1/jobs/${job.id}`, { method: "DELETE" })).status).toBe(200);
    const held = () =>
      runInDurableObject(
        shardOf(job),
        (_s: Shard, state) => state.storage.sql.exec("SELECT COUNT(*) AS n FROM jobs WHERE id = ?", job.id).one().n,
      );
    expect(await held()).toBe(1);
    await runRetention(shardOf(job));
    expect(await runIdsInShard(job)).toEqual([]);
    expect(await held()).toBe(0);
    // Its archived runs stay readable through the catalog's tombstone, until the sweep, finding
    // the shard holds nothing more of the job, removes the tombstone too.
    const res = await history(job, now - 21 * DAY, now - 19 * DAY);
    expect(
      (await res.text())
        .trim()
        .split("\n")
        .map((l) => shortId(job, (JSON.parse(l) as Run).id)),
    ).toEqual(["run_gone_0"]);
    const tombstone = () => env.DB.prepare("SELECT COUNT(*) AS n FROM jobs WHERE id = ?").bind(job.id).first<{ n: number }>();
    expect((await tombstone())!.n).toBe(1);
    await sweepFully();
    expect((await tombstone())!.n).toBe(0);
    expect((await history(job, now - 21 * DAY, now - 19 * DAY)).status).toBe(404);
  });

  it("the sweep leaves a deleted job's tombstone while its shard still holds the job", async () => {
    const job = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("retention-kept") } });
    await seedRuns(job, [{ id: "run_recent_kept", scheduledAt: Date.now() - DAY }]);
    expect((await api(`/v1/jobs/${job.id}`, { method: "DELETE" })).status).toBe(200);
    await sweepFully();
    const row = await env.DB.prepare("SELECT deleted_at FROM jobs WHERE id = ?").bind(job.id).first<{ deleted_at: number }>();
    expect(row?.deleted_at).toBeGreaterThan(0);
    expect((await listRuns(job.id)).map((r) => shortId(job, r.id))).toEqual(["run_recent_kept"]);
  });
});
