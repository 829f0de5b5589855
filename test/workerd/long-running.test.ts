import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Run } from "../../src/model/run";
import { createJob, FAR_CRON, fireNow, getRun, hitsOf, listRuns, makeRunDue, receiverPath, waitForRun } from "./helpers";

/** A target's call back to edgecron: no API token, only the completion token. */
function callback(runId: string, action: "complete" | "heartbeat", body: unknown): Promise<Response> {
  return SELF.fetch(`https://edgecron.test/v1/runs/${runId}/${action}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function acceptedRun(
  name: string,
  retry: Record<string, unknown> = { maxAttempts: 2 },
): Promise<{ run: Run; token: string; job: Awaited<ReturnType<typeof createJob>> }> {
  const url = receiverPath(name, "status=202");
  const job = await createJob({ schedule: FAR_CRON, target: { url }, timeoutMs: 5_000, retry });
  await fireNow(job);
  const [queued] = await listRuns(job.id);
  const run = await waitForRun(queued!.id, ["running"]);
  await expect.poll(async () => (await getRun(run.id)).attemptLog!.at(-1)!.outcome).toBe("accepted");
  const [hit] = await hitsOf(url);
  const token = hit!.headers["x-edgecron-completion-token"]!;
  // The shard's token (shard, fence, a secret part), then the MAC the consumer made over it.
  expect(token).toMatch(/^shard-\d+\.1\.[0-9a-z]{24}\.[A-Za-z0-9_-]{43}$/);
  return { run, token, job };
}

describe("long-running targets (202 Accepted)", () => {
  it("a 202 keeps the run running until the target completes it with its token", async () => {
    const { run, token } = await acceptedRun("lr-ok");
    const res = await callback(run.id, "complete", { token, ok: true, result: "exported 42 rows" });
    expect(res.status).toBe(200);
    const done = (await res.json()) as Run;
    expect(done).toMatchObject({ state: "succeeded", result: "exported 42 rows", attempts: 1 });
    expect(done.attemptLog![0]).toMatchObject({ outcome: "succeeded", status: null });

    // Completing again is stale and changes nothing.
    const again = await callback(run.id, "complete", { token, ok: false, error: "oops" });
    expect(again.status).toBe(409);
    expect(await again.json()).toMatchObject({ error: { code: "stale" } });
    expect((await getRun(run.id)).state).toBe("succeeded");
  });

  it("a reported failure is retried per policy, or fails at once with retry: false", async () => {
    const { run, token } = await acceptedRun("lr-fail");
    const res = await callback(run.id, "complete", { token, ok: false, error: "export crashed" });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ state: "retry_wait", error: "export crashed" });

    const second = await acceptedRun("lr-final");
    const final = await callback(second.run.id, "complete", { token: second.token, ok: false, error: "bad input", retry: false });
    expect(await final.json()).toMatchObject({ state: "failed", error: "bad input" });
  });

  it("heartbeats extend the lease; without them the attempt times out and a late completion is stale", async () => {
    // A retry delay of its own, not a jittered one that may end (and requeue the run) before the late completion.
    const { run, token, job } = await acceptedRun("lr-hb", {
      maxAttempts: 2,
      jitter: "none",
      backoff: { initialMs: 600_000, maxMs: 600_000 },
    });
    const beat = await callback(run.id, "heartbeat", { token, extendMs: 600_000 });
    expect(beat.status).toBe(200);
    const { leaseUntil } = (await beat.json()) as { leaseUntil: string };
    expect(Date.parse(leaseUntil)).toBeGreaterThan(Date.now() + 500_000);

    // The lease expires (as if no heartbeat came): the attempt is timed out and retried.
    await makeRunDue(job, run.id);
    expect(await getRun(run.id)).toMatchObject({ state: "retry_wait" });
    const late = await callback(run.id, "complete", { token, ok: true });
    expect(late.status).toBe(409);
    const after = await getRun(run.id);
    expect(after.state).toBe("retry_wait");
    expect(after.attemptLog![0]).toMatchObject({ outcome: "timed_out", late: "completed: succeeded" });
  });

  it.each([
    ["a forged token", (t: string) => `${t.slice(0, -4)}zzzz`, 403, "invalid_token"],
    ["its secret part changed, the MAC kept", (t: string) => t.replace(/\.[0-9a-z]{24}\./, `.${"z".repeat(24)}.`), 403, "invalid_token"],
    // As tokens were before they carried a MAC: refused (docs/architecture.md, "Completion tokens").
    ["the shard's part alone", (t: string) => t.slice(0, t.lastIndexOf(".")), 403, "invalid_token"],
    ["garbage", () => "nope", 403, "invalid_token"],
    // That shard has never heard of the run: answered like a wrong token, so nobody learns which runs exist.
    ["another shard's name", (t: string) => t.replace(/^shard-\d+/, "shard-99999"), 403, "invalid_token"],
  ] as const)("%s → %i, nothing changes", async (label, forge, status, code) => {
    const { run, token } = await acceptedRun(`lr-forge-${label.length}`);
    const res = await callback(run.id, "complete", { token: forge(token), ok: true });
    expect(res.status).toBe(status);
    expect(await res.json()).toMatchObject({ error: { code } });
    expect((await getRun(run.id)).state).toBe("running");
  });

  it("bad completion bodies → 400 naming the field", async () => {
    const res = await callback("run_0000000000000000000_abc", "complete", { token: "x", ok: "yes" });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { issues: [{ path: "ok" }] } });
    const hb = await callback("run_0000000000000000000_abc", "heartbeat", { token: "x", extendMs: 5 });
    expect(hb.status).toBe(400);
  });
});
