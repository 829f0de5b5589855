import { createExecutionContext, createMessageBatch, env, getQueueResult, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { armFault, disarmFaults } from "../../src/faults";
import type { Job } from "../../src/model/job";
import type { QueueMessage } from "../../src/protocol/queue-messages";
import runner, { type RunnerEnv } from "../../src/runner";
import type { Shard } from "../../src/shard/shard";
import { api, createJob, FAR_CRON, getRun, hitsOf, receiverPath, shardOf, waitForRun } from "./helpers";

/**
 * The runner Worker's own entry point (src/runner.ts), handed batches directly, with only the
 * bindings runner/wrangler.toml gives it (RunnerEnv: no API_TOKEN, no ARCHIVE). The other
 * workerd tests consume through the scheduler's export of the same handler; these make sure
 * the runner's export takes every kind of message the queues carry, the kept outcomes
 * (`{ kind: "outcomes" }`, src/consumer/reporter.ts) included.
 */

afterEach(() => disarmFaults());

/** The test Worker's bindings less the two the runner is not given. */
function runnerEnv(): RunnerEnv {
  const { API_TOKEN: _token, ARCHIVE: _archive, ...rest } = env;
  return rest;
}

async function deliver(queue: string, bodies: QueueMessage[]) {
  const batch = createMessageBatch<QueueMessage>(
    queue,
    bodies.map((body, i) => ({ id: `m${i}`, timestamp: new Date(), attempts: 1, body })),
  );
  const ctx = createExecutionContext();
  await runner.queue(batch, runnerEnv(), ctx);
  return getQueueResult(batch, ctx);
}

/** One queued run of a new one-attempt job, its dispatch held back from the real queue. */
async function heldRun(url: string): Promise<{ job: Job; runId: string; fence: number }> {
  const job = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 1 } });
  armFault("shard.queueSend", Infinity);
  const res = await api(`/v1/jobs/${job.id}/backfill`, {
    method: "POST",
    json: { from: "2000-01-01T00:00:00Z", to: "2000-12-31T00:00:00Z" },
  });
  expect(res.status, await res.clone().text()).toBe(202);
  const [run] = await runInDurableObject(
    shardOf(job),
    (_s: Shard, state) =>
      state.storage.sql.exec("SELECT id, fence, state FROM runs WHERE job_id = ?", job.id).toArray() as Array<{
        id: string;
        fence: number;
        state: string;
      }>,
  );
  expect(run?.state).toBe("running"); // dispatched: its attempt began, its send refused
  return { job, runId: run!.id, fence: run!.fence };
}

describe("the runner Worker's queue handler", () => {
  it("runs a dispatch with the runner's bindings alone: the target is called and the run recorded", async () => {
    const url = receiverPath("runner-dispatch");
    const { job, runId, fence } = await heldRun(url);
    const result = await deliver("edgecron-runs", [{ shard: job.shard, runId, fence }]);
    expect(result.explicitAcks).toEqual(["m0"]);
    expect(result.retryMessages).toEqual([]);
    const hits = await hitsOf(url);
    expect(hits).toHaveLength(1);
    // The shard's token with the MAC the runner made over it (src/security/completion-tokens.ts).
    expect(hits[0]!.headers["x-edgecron-completion-token"]).toMatch(/\.[A-Za-z0-9_-]{43}$/);
    expect((await getRun(runId)).state).toBe("succeeded");
  });

  for (const queue of ["edgecron-runs", "edgecron-runs-dlq"]) {
    it(`reports outcomes kept on the queue for their shard (from ${queue}) and acks them`, async () => {
      const url = receiverPath("runner-kept");
      const { job, runId, fence } = await heldRun(url);
      // An attempt a consumer ran, whose report did not reach the shard.
      expect((await getRun(runId)).state).toBe("running");

      const result = await deliver(queue, [
        { kind: "outcomes", shard: job.shard, outcomes: [{ runId, fence, ok: true, status: 200, error: null }] },
      ]);
      expect(result.explicitAcks).toEqual(["m0"]);
      expect(result.retryMessages).toEqual([]);
      const run = await waitForRun(runId, ["succeeded", "dead"]);
      expect(run.state).toBe("succeeded");
      expect(run.attempts).toBe(1);
      // Only the outcome travelled: the target was not called again.
      expect(await hitsOf(url)).toHaveLength(0);
    });
  }
});
