import { SELF } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import type { Job } from "../../src/model/job";
import type { Run } from "../../src/model/run";
import { api, createJob, FAR_CRON, getRun, hitsOf, listRuns, receiverPath, waitForRun } from "./helpers";

/**
 * Workflow jobs (issue 11, docs/workflows.md), end to end: the API, the shard (each step a run
 * of its own), the real queue and consumer, and the loopback receiver. Each test has its own
 * job, so its own run ids and (almost always) its own shard.
 */

type StepRun = NonNullable<Run["steps"]>[number];

async function trigger(job: Job): Promise<Run> {
  const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
  expect(res.status, await res.clone().text()).toBe(202);
  return res.json();
}

const stepOf = (run: Run, id: string): StepRun => run.steps!.find((s) => s.id === id)!;

/** A receiver path answering `body` (JSON when an object). */
function answering(name: string, body: unknown, query = ""): string {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return receiverPath(name, `body=${encodeURIComponent(text)}${query ? `&${query}` : ""}`);
}

async function post(path: string): Promise<Response> {
  return api(path, { method: "POST" });
}

describe("workflows: a run is a graph of HTTP steps", () => {
  it("a diamond runs each step once its parents end, passing their results down", async () => {
    const urls = {
      a: answering("wf-a", { rows: 3 }),
      b: answering("wf-b", "plain text"),
      c: answering("wf-c", { ok: true }),
      d: receiverPath("wf-d"),
    };
    const job = await createJob({
      schedule: FAR_CRON,
      steps: [
        { id: "a", target: { url: urls.a } },
        { id: "b", after: ["a"], target: { url: urls.b } },
        { id: "c", after: ["a"], target: { url: urls.c, body: { mine: 1 } } },
        { id: "d", after: ["b", "c"], target: { url: urls.d } },
      ],
    });
    expect(job.target).toBeUndefined();
    expect(job.steps!.map((s) => s.id)).toEqual(["a", "b", "c", "d"]);
    expect(job.steps![1]).toMatchObject({ id: "b", after: ["a"], target: { url: urls.b, method: "POST", headerNames: [] } });

    const started = await trigger(job);
    const run = await waitForRun(started.id, ["succeeded", "failed"]);
    expect(run.state).toBe("succeeded");
    expect(run.steps!.map((s) => [s.id, s.state])).toEqual([
      ["a", "succeeded"],
      ["b", "succeeded"],
      ["c", "succeeded"],
      ["d", "succeeded"],
    ]);
    expect(stepOf(run, "a")).toMatchObject({ result: { rows: 3 }, attempt: 1, status: 200, error: null });
    expect(stepOf(run, "b").result).toBe("plain text");
    expect(stepOf(run, "d").attemptLog).toHaveLength(1);

    const [a, b, c, d] = await Promise.all([hitsOf(urls.a), hitsOf(urls.b), hitsOf(urls.c), hitsOf(urls.d)]);
    for (const hits of [a, b, c, d]) expect(hits).toHaveLength(1);
    const scheduledAt = run.scheduledAt;
    expect(JSON.parse(a![0]!.body)).toEqual({ runId: run.id, scheduledAt, upstream: {} });
    expect(JSON.parse(b![0]!.body)).toEqual({ runId: run.id, scheduledAt, upstream: { a: { rows: 3 } } });
    // A step with a body of its own is sent that body.
    expect(JSON.parse(c![0]!.body)).toEqual({ mine: 1 });
    expect(JSON.parse(d![0]!.body)).toEqual({ runId: run.id, scheduledAt, upstream: { b: "plain text", c: { ok: true } } });
    expect(d![0]!.headers).toMatchObject({ "x-edgecron-step": "d", "idempotency-key": `${run.id}:d`, "content-type": "application/json" });
    // d started only after both its parents had answered.
    expect(d![0]!.receivedAt).toBeGreaterThanOrEqual(Math.max(b![0]!.receivedAt, c![0]!.receivedAt));

    // The job's runs are its workflow runs, not their steps.
    expect((await listRuns(job.id)).map((r) => r.id)).toEqual([run.id]);
  });

  it("a failing middle step skips what depends on it and starts the any_failed alert step; the run is a dead letter", async () => {
    const urls = { extract: receiverPath("wf-extract"), load: receiverPath("wf-load", "status=400"), report: receiverPath("wf-report") };
    const alert = receiverPath("wf-alert");
    const job = await createJob({
      schedule: FAR_CRON,
      steps: [
        { id: "extract", target: { url: urls.extract } },
        { id: "load", after: ["extract"], target: { url: urls.load } },
        { id: "report", after: ["load"], target: { url: urls.report } },
        { id: "alert", after: ["report"], when: "any_failed", target: { url: alert } },
        { id: "cleanup", after: ["extract"], when: "any_failed", target: { url: receiverPath("wf-cleanup") } },
      ],
    });
    const run = await waitForRun((await trigger(job)).id, ["succeeded", "failed"]);
    expect(run.state).toBe("failed");
    expect(run.error).toBe("failed steps: load");
    expect(Object.fromEntries(run.steps!.map((s) => [s.id, s.state]))).toEqual({
      extract: "succeeded",
      load: "failed",
      report: "skipped",
      alert: "succeeded",
      cleanup: "skipped",
    });
    expect(stepOf(run, "load")).toMatchObject({ status: 400, attempt: 1 });
    expect(stepOf(run, "load").error).toContain("HTTP 400");
    expect(await hitsOf(urls.report)).toHaveLength(0);
    // The alert step hears of the failure through the skipped step above it.
    const [alertHit] = await hitsOf(alert);
    expect(JSON.parse(alertHit!.body)).toMatchObject({ runId: run.id, upstream: { report: null } });

    const dead = await api(`/v1/dead-letters?jobId=${job.id}`);
    expect(((await dead.json()) as { items: Run[] }).items.map((r) => r.id)).toEqual([run.id]);
  });

  it("retry of a failed workflow run re-runs only the steps that did not succeed", async () => {
    const first = receiverPath("wf-first");
    const flaky = receiverPath("wf-flaky", "status=400,200&body=second");
    const last = receiverPath("wf-last");
    const job = await createJob({
      schedule: FAR_CRON,
      steps: [
        { id: "first", target: { url: first } },
        { id: "flaky", after: ["first"], target: { url: flaky } },
        { id: "last", after: ["flaky"], target: { url: last } },
      ],
    });
    const failed = await waitForRun((await trigger(job)).id, ["succeeded", "failed"]);
    expect(failed.state).toBe("failed");
    expect(stepOf(failed, "last").state).toBe("skipped");

    // A step's run is not retried on its own.
    expect((await post(`/v1/runs/${failed.id}.flaky/retry`)).status).toBe(409);
    const retried = await post(`/v1/runs/${failed.id}/retry`);
    expect(retried.status, await retried.clone().text()).toBe(202);

    const run = await waitForRun(failed.id, ["succeeded", "failed"]);
    expect(run.state).toBe("succeeded");
    expect(await hitsOf(first)).toHaveLength(1);
    expect(await hitsOf(flaky)).toHaveLength(2);
    const lastHits = await hitsOf(last);
    expect(lastHits).toHaveLength(1);
    expect(JSON.parse(lastHits[0]!.body).upstream).toEqual({ flaky: "second" });
    // The retried step keeps the attempt that failed, and shows the new one after it.
    expect(stepOf(run, "flaky").attemptLog.map((a) => [a.outcome, a.status])).toEqual([
      ["failed", 400],
      ["succeeded", 200],
    ]);
  });

  it("a step's failures are retried with its own policy; flow control counts the workflow run as one run", async () => {
    const flaky = receiverPath("wf-retry", "status=500,200");
    const job = await createJob({
      schedule: FAR_CRON,
      maxConcurrency: 1,
      steps: [
        { id: "flaky", target: { url: flaky }, retry: { maxAttempts: 2, backoff: { initialMs: 100, maxMs: 100 } } },
        { id: "slow", after: ["flaky"], target: { url: receiverPath("wf-mc-slow", "delayMs=500") } },
      ],
    });
    const first = await trigger(job);
    const second = await trigger(job);
    // The second run waits for the first (maxConcurrency 1), whose steps run meanwhile.
    expect(second.state).toBe("waiting");
    const done = await waitForRun(first.id, ["succeeded", "failed"]);
    expect(done.state).toBe("succeeded");
    expect(stepOf(done, "flaky").attemptLog.map((a) => [a.outcome, a.status])).toEqual([
      ["failed", 500],
      ["succeeded", 200],
    ]);
    expect((await waitForRun(second.id, ["succeeded", "failed"])).state).toBe("succeeded");
    expect(Date.parse((await getRun(second.id)).startedAt!)).toBeGreaterThanOrEqual(Date.parse(done.finishedAt!));
  });

  it("a pause lets the step in flight finish and starts nothing new; resume goes on", async () => {
    const slow = receiverPath("wf-slow", "delayMs=1500");
    const next = receiverPath("wf-next");
    const job = await createJob({
      schedule: FAR_CRON,
      steps: [
        { id: "slow", target: { url: slow } },
        { id: "next", after: ["slow"], target: { url: next } },
      ],
    });
    const started = await trigger(job);
    await vi.waitFor(async () => expect(await hitsOf(slow)).toHaveLength(1), { timeout: 10_000, interval: 50 });
    expect((await post(`/v1/jobs/${job.id}/pause`)).status).toBe(200);

    const paused = await vi.waitFor(
      async () => {
        const run = await getRun(started.id);
        expect(stepOf(run, "slow").state).toBe("succeeded");
        return run;
      },
      { timeout: 10_000, interval: 100 },
    );
    expect(paused.state).toBe("running");
    expect(stepOf(paused, "next").state).toBe("blocked");
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await hitsOf(next)).toHaveLength(0);

    expect((await post(`/v1/jobs/${job.id}/resume`)).status).toBe(200);
    const run = await waitForRun(started.id, ["succeeded", "failed"]);
    expect(run.state).toBe("succeeded");
    expect(await hitsOf(next)).toHaveLength(1);
  });

  it("deleting the job cancels its workflow run; its step in flight finishes, and nothing starts after it", async () => {
    const slow = receiverPath("wf-del-slow", "delayMs=1000");
    const next = receiverPath("wf-del-next");
    const job = await createJob({
      schedule: FAR_CRON,
      steps: [
        { id: "slow", target: { url: slow } },
        { id: "next", after: ["slow"], target: { url: next } },
      ],
    });
    const started = await trigger(job);
    await vi.waitFor(async () => expect(await hitsOf(slow)).toHaveLength(1), { timeout: 10_000, interval: 50 });
    expect((await api(`/v1/jobs/${job.id}`, { method: "DELETE" })).status).toBeLessThan(300);
    expect(await getRun(started.id)).toMatchObject({ state: "cancelled", error: "job deleted" });
    await vi.waitFor(async () => expect(stepOf(await getRun(started.id), "slow").state).toBe("succeeded"), {
      timeout: 10_000,
      interval: 100,
    });
    const run = await getRun(started.id);
    expect(run.state).toBe("cancelled");
    expect(stepOf(run, "next").state).toBe("blocked");
    expect(await hitsOf(next)).toHaveLength(0);
  });

  it("a step that answers 202 ends with its completion, whose result the steps below receive", async () => {
    const long = receiverPath("wf-long", "status=202");
    const after = receiverPath("wf-after-long");
    const job = await createJob({
      schedule: FAR_CRON,
      steps: [
        { id: "long", target: { url: long } },
        { id: "after", after: ["long"], target: { url: after } },
      ],
    });
    const started = await trigger(job);
    const [hit] = await vi.waitFor(
      async () => {
        const hits = await hitsOf(long);
        expect(hits).toHaveLength(1);
        return hits;
      },
      { timeout: 10_000, interval: 50 },
    );
    const stepRunId = hit!.headers["x-edgecron-run-id"]!;
    expect(stepRunId).toBe(`${started.id}.long`);
    await expect.poll(async () => stepOf(await getRun(started.id), "long").attemptLog.at(-1)?.outcome).toBe("accepted");
    const res = await SELF.fetch(`https://edgecron.test/v1/runs/${stepRunId}/complete`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: hit!.headers["x-edgecron-completion-token"], ok: true, result: '{"exported":42}' }),
    });
    expect(res.status, await res.clone().text()).toBe(200);

    const run = await waitForRun(started.id, ["succeeded", "failed"]);
    expect(run.state).toBe("succeeded");
    expect(stepOf(run, "long").result).toEqual({ exported: 42 });
    const [afterHit] = await hitsOf(after);
    expect(JSON.parse(afterHit!.body).upstream).toEqual({ long: { exported: 42 } });
  });

  it("a step whose response is larger than 64 KiB fails with a clear error", async () => {
    const job = await createJob({
      schedule: FAR_CRON,
      steps: [{ id: "big", target: { url: receiverPath("wf-big", `bodyBytes=${64 * 1024 + 1}`) } }],
    });
    const run = await waitForRun((await trigger(job)).id, ["succeeded", "failed"]);
    expect(run.state).toBe("failed");
    expect(stepOf(run, "big").error).toMatch(/larger than 64 KiB/);
  });

  it("PATCH replaces a workflow's steps, and keeps a job what it was made: one target or steps", async () => {
    const target = { url: receiverPath("wf-patch") };
    const job = await createJob({ schedule: FAR_CRON, steps: [{ id: "a", target }] });
    const patch = (id: string, json: unknown) => api(`/v1/jobs/${id}`, { method: "PATCH", json });
    const changed = await patch(job.id, {
      steps: [
        { id: "a", target },
        { id: "b", after: ["a"], when: "all_done", target, timeoutMs: 5_000 },
      ],
    });
    expect(changed.status, await changed.clone().text()).toBe(200);
    expect(((await changed.json()) as Job).steps!.map((s) => [s.id, s.after ?? [], s.when ?? null])).toEqual([
      ["a", [], null],
      ["b", ["a"], "all_done"],
    ]);
    const cyclic = await patch(job.id, { steps: [{ id: "a", after: ["a"], target }] });
    expect(cyclic.status).toBe(400);
    const toTarget = await patch(job.id, { target });
    expect(toTarget.status).toBe(400);
    expect(((await toTarget.json()) as { error: { message: string } }).error.message).toMatch(/^target: a workflow job has steps/);
    const single = await createJob({ schedule: FAR_CRON, target });
    const toSteps = await patch(single.id, { steps: [{ id: "a", target }] });
    expect(toSteps.status).toBe(400);
  });

  it("refuses a definition that is not a graph, naming the problem", async () => {
    const target = { url: receiverPath("wf-invalid") };
    const refusal = async (body: Record<string, unknown>) => {
      const res = await api("/v1/jobs", { method: "POST", json: { schedule: FAR_CRON, ...body } });
      expect(res.status).toBe(400);
      return ((await res.json()) as { error: { message: string; issues: Array<{ path: string; message: string }> } }).error;
    };
    const cycle = await refusal({
      steps: [
        { id: "a", after: ["c"], target },
        { id: "b", after: ["a"], target },
        { id: "c", after: ["b"], target },
      ],
    });
    expect(cycle.issues).toEqual([{ path: "steps", message: "the steps form a cycle: b → c → a → b" }]);
    expect((await refusal({ steps: [{ id: "a", after: ["x"], target }] })).issues).toEqual([
      { path: "steps.0.after.0", message: 'no step has the id "x"' },
    ]);
    expect((await refusal({ steps: [{ id: "a", after: ["a"], target }] })).issues[0]!.path).toBe("steps.0.after.0");
    expect(
      (
        await refusal({
          steps: [
            { id: "a", target },
            { id: "a", target },
          ],
        })
      ).issues[0],
    ).toEqual({ path: "steps.1.id", message: 'duplicate step id "a" (also steps.0.id)' });
    const many = Array.from({ length: 51 }, (_, i) => ({ id: `s${i}`, target }));
    expect((await refusal({ steps: many })).issues).toEqual([{ path: "steps", message: "at most 50 steps, got 51" }]);
    expect((await refusal({ steps: [] })).issues[0]!.path).toBe("steps");
    expect((await refusal({ target, steps: [{ id: "a", target }] })).message).toContain("give exactly one of target or steps");
    expect((await refusal({})).message).toContain("give exactly one of target or steps");
    expect((await refusal({ steps: [{ id: "a b", target }] })).issues[0]!.path).toBe("steps.0.id");
    expect((await refusal({ steps: [{ id: "a", target: { url: "ftp://x" } }] })).issues[0]!.path).toBe("steps.0.target.url");
  });
});
