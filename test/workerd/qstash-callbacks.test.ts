/**
 * A QStash message's failure callback: published once per delivery of an attempt that ends the
 * message, through a dead-letter retry too; and an attempt the shard itself times out (no consumer
 * answered) waits the message's retry delay. Against the real D1, shards, Queue and the loopback receiver.
 */
import { runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { disarmFaults } from "../../src/faults";
import type { Job } from "../../src/model/job";
import { jobIdOfMessage } from "../../src/qstash/ids";
import type { Shard } from "../../src/shard/shard";
import { createTenant, expireAttempt, fireInFlight, hitsOf, receiverPath, shardOf } from "./helpers";
import { messageShard } from "./messages";

type Tenant = Awaited<ReturnType<typeof createTenant>>;

afterEach(() => disarmFaults());

async function publish(tenant: Tenant, url: string, headers: Record<string, string>): Promise<string> {
  const res = await tenant.api(`/v2/publish/${url}`, { method: "POST", headers: { "Content-Type": "text/plain", ...headers }, body: "hi" });
  expect(res.status, await res.clone().text()).toBe(200);
  return ((await res.json()) as { messageId: string }).messageId;
}

async function deadLetters(tenant: Tenant): Promise<Array<{ dlqId: string }>> {
  const res = await tenant.api("/v2/dlq");
  return ((await res.json()) as { messages: Array<{ dlqId: string }> }).messages;
}

describe("a QStash failure callback", () => {
  it("is delivered again after a dead-letter retry whose attempt fails too", async () => {
    const tenant = await createTenant();
    const url = receiverPath("cb-dlq-target", "status=500");
    const callback = receiverPath("cb-dlq-failure");
    await publish(tenant, url, { "Upstash-Retries": "0", "Upstash-Failure-Callback": callback });
    const [letter] = await vi.waitFor(
      async () => {
        const letters = await deadLetters(tenant);
        expect(letters).toHaveLength(1);
        return letters;
      },
      { timeout: 15_000, interval: 200 },
    );
    await vi.waitFor(async () => expect(await hitsOf(callback)).toHaveLength(1), { timeout: 15_000, interval: 100 });
    const retried = await tenant.api("/v2/dlq/retry", { method: "POST", json: { dlqIds: [letter!.dlqId] } });
    expect(retried.status, await retried.clone().text()).toBe(200);
    await vi.waitFor(async () => expect(await hitsOf(url)).toHaveLength(2), { timeout: 15_000, interval: 100 });
    // The retry's attempt is attempt 1 again: its callback is its own, not a duplicate of the first's.
    await vi.waitFor(async () => expect(await hitsOf(callback)).toHaveLength(2), { timeout: 15_000, interval: 100 });
  });
});

describe("a QStash attempt whose lease runs out", () => {
  /** A message whose run is made due while its shard's queue takes no dispatch: its lease is all that ends its attempt. */
  async function leasedMessage(tenant: Tenant, headers: Record<string, string>) {
    const id = await publish(tenant, receiverPath("cb-lease-target"), { "Upstash-Delay": "1h", ...headers });
    const jobId = jobIdOfMessage(id)!;
    const job = { id: jobId, ...messageShard(jobId) } as Job;
    await fireInFlight(job);
    const runId = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
      String(state.storage.sql.exec("SELECT id FROM runs WHERE job_id = ?", jobId).one().id),
    );
    return { job, runId };
  }
  const rowOf = (job: Job, runId: string) =>
    runInDurableObject(shardOf(job), (_s: Shard, state) =>
      state.storage.sql.exec("SELECT state, attempt, due_at, finished_at FROM runs WHERE id = ?", runId).one(),
    );

  it("is retried after the message's retry delay", async () => {
    const tenant = await createTenant();
    const { job, runId } = await leasedMessage(tenant, { "Upstash-Retries": "1", "Upstash-Retry-Delay": "600000" });
    // Its first attempt: dispatched, never delivered, timed out by its lease.
    const before = Date.now();
    expect(await expireAttempt(job, runId)).toMatchObject({ state: "retry_wait" });
    const waiting = await rowOf(job, runId);
    expect(Number(waiting.due_at)).toBeGreaterThanOrEqual(before + 600_000);
  });

  it("ending the message, sends its failure callback, though no consumer saw it fail", async () => {
    const tenant = await createTenant();
    const callback = receiverPath("cb-lease-failure");
    const { job, runId } = await leasedMessage(tenant, { "Upstash-Retries": "0", "Upstash-Failure-Callback": callback });
    expect(await expireAttempt(job, runId)).toMatchObject({ state: "dead" });
    await vi.waitFor(async () => expect(await hitsOf(callback)).toHaveLength(1), { timeout: 20_000, interval: 100 });
    const sent = JSON.parse((await hitsOf(callback))[0]!.body) as { status: number; retried: number; dlqId?: string };
    expect(sent).toMatchObject({ status: 0, retried: 0, dlqId: runId });
  });
});
