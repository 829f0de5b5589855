import type { Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, sleep, startStack, until as untilOf } from "../support/local-stack";
import { type Hit, startReceiver } from "../support/receiver";

/**
 * End to end: the real stack as `npm start` runs it (scripts/start.mjs: local D1 migrations,
 * `wrangler dev` with the Worker, the Shard Durable Objects and their alarms, the local Queue
 * and its consumer, and the periodic sweep), driven only through the public HTTP API, with a
 * real loopback HTTP receiver as the jobs' target. The workflow case shares the stack: a
 * stack costs 10 to 20 s to start, the case well under one.
 */

const TOKEN = "e2e-token-7f3c-0123456789abcdef0123";
/** A sanity bound for lateness on a shared, noisy machine; not a speed assertion. */
const LATE_BOUND_MS = 5_000;
const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

let stack: Stack | undefined;
let receiver: { url: string; server: Server; hits: Map<string, Hit[]> } | undefined;

const api = (method: string, path: string, body?: unknown, auth = true) => stack!.api(method, path, body, { auth });
/** Polls `check` until it returns a value other than undefined; fails with `what` and the stack's output. */
const until = <T>(what: string, timeoutMs: number, check: () => Promise<T | undefined> | T | undefined) =>
  untilOf(what, timeoutMs, check, stack);

/**
 * Runs `body`; if it fails, adds what the API says about the jobs' runs (with the attempt logs
 * of the runs no target saw) and what the receiver got, so that a failure explains itself.
 */
async function explained(jobs: Array<{ id: string; name: string } | undefined>, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (err) {
    const lines: string[] = [];
    for (const job of jobs) {
      if (!job) continue;
      const seen = new Set(hitsOf(job.name).map((h) => h.headers["x-edgecron-run-id"]));
      lines.push(
        `receiver /hit/${job.name}: ${JSON.stringify(hitsOf(job.name).map((h) => ({ run: h.headers["x-edgecron-run-id"], attempt: h.headers["x-edgecron-attempt"], scheduledAt: h.headers["x-edgecron-scheduled-at"], receivedAt: new Date(h.receivedAt).toISOString() })))}`,
      );
      try {
        const runs = await api("GET", `/v1/jobs/${job.id}/runs?limit=200`);
        lines.push(`runs of ${job.id} (${job.name}): ${JSON.stringify(runs.json)}`);
        for (const run of runs.json.items ?? []) {
          if (!seen.has(run.id)) lines.push(`unseen run ${run.id}: ${JSON.stringify((await api("GET", `/v1/runs/${run.id}`)).json)}`);
        }
      } catch (e) {
        lines.push(`runs of ${job.id}: unreadable (${(e as Error).message})`);
      }
    }
    if (stack!.reloads > 0) {
      lines.unshift(
        "NOTE: wrangler dev reloaded the Worker during this test (a watched source file changed); dispatches in flight in the local Queue are lost then and only redispatched after CLAIM_TIMEOUT_MS (60 s).",
      );
    }
    (err as Error).message +=
      `\n--- diagnostics (at ${new Date().toISOString()}) ---\n${lines.join("\n")}\n--- stack output ---\n${stack!.tail()}`;
    throw err;
  }
}

const hitsOf = (name: string): Hit[] => [...(receiver?.hits.get(name) ?? [])];
const scheduledAtOf = (hit: Hit) => Date.parse(hit.headers["x-edgecron-scheduled-at"] ?? "");

beforeAll(async () => {
  receiver = await startReceiver();
  stack = await startStack({ token: TOKEN, env: { SWEEP_INTERVAL_MS: "5000" } });
});

afterAll(async () => {
  if (receiver) await new Promise<void>((resolve) => receiver!.server.close(() => resolve()));
  await stack?.stop(); // fails if a process of the stack (wrangler, workerd) survives SIGKILL
});

describe("edgecron under wrangler dev, as npm start runs it", () => {
  let everyJob: any;
  let atJob: any;
  let atInstant: number;

  it("answers 401 JSON without a token, and serves its OpenAPI document", async () => {
    const unauth = await api("GET", "/v1/jobs", undefined, false);
    expect(unauth.status).toBe(401);
    expect(unauth.headers.get("content-type")).toMatch(/^application\/json/);
    expect(unauth.json.error.code).toBe("unauthorized");
    expect(unauth.headers.get("www-authenticate")).toMatch(/^Bearer/);

    const wrong = await fetch(`${stack!.base}/v1/jobs`, { headers: { authorization: "Bearer not-the-token" } });
    expect(wrong.status).toBe(401);

    const doc = await api("GET", "/openapi.json", undefined, false);
    expect(doc.status).toBe(200);
    expect(doc.json.openapi).toEqual(expect.any(String));
    expect(doc.json.paths["/v1/jobs"]).toBeDefined();
  });

  it("creates an every-1s job and a one-off job, each with its first fire", async () => {
    const every = await api("POST", "/v1/jobs", {
      schedule: { every: "1s" },
      target: { url: `${receiver!.url}/hit/every`, headers: { "X-Custom": "yes" }, body: { hello: "world" } },
    });
    expect(every.status, JSON.stringify(every.json)).toBe(201);
    everyJob = every.json;
    expect(everyJob.id).toMatch(/^job_[0-9a-z]{19}$/);
    expect(everyJob.target.method).toBe("POST");
    expect(everyJob.nextRunAt).toMatch(ISO_INSTANT);
    // The grid of an interval starts at creation: the first fire is one interval later.
    expect(Date.parse(everyJob.nextRunAt)).toBe(Date.parse(everyJob.createdAt) + 1_000);

    atInstant = Date.now() + 3_000;
    const at = await api("POST", "/v1/jobs", {
      schedule: { at: new Date(atInstant).toISOString() },
      target: { url: `${receiver!.url}/hit/at`, method: "PUT" },
    });
    expect(at.status, JSON.stringify(at.json)).toBe(201);
    atJob = at.json;
    expect(atJob.id).toMatch(/^job_[0-9a-z]{19}$/);
    expect(atJob.id).not.toBe(everyJob.id);
    expect(atJob.nextRunAt).toBe(new Date(atInstant).toISOString());

    const listed = await api("GET", "/v1/jobs");
    expect(listed.status).toBe(200);
    expect(listed.json.items.map((j: { id: string }) => j.id)).toEqual(expect.arrayContaining([everyJob.id, atJob.id]));
  });

  it("calls the targets on schedule with the edgecron headers, the job's headers, body and method", async () => {
    expect(everyJob, "job creation failed").toBeDefined();
    await explained(
      [
        { id: everyJob.id, name: "every" },
        { id: atJob.id, name: "at" },
      ],
      () => checkDeliveries(),
    );
  });

  async function checkDeliveries(): Promise<void> {
    await until("4 hits of the every job and 1 of the at job", 20_000, () =>
      hitsOf("every").length >= 4 && hitsOf("at").length >= 1 ? true : undefined,
    );
    const every = hitsOf("every");
    const at = hitsOf("at");

    for (const [hits, job, method] of [
      [every, everyJob, "POST"],
      [at, atJob, "PUT"],
    ] as const) {
      for (const hit of hits) {
        const h = hit.headers;
        expect(hit.method).toBe(method);
        expect(h["x-edgecron-run-id"]).toMatch(/^run_/);
        expect(h["x-edgecron-run-id"]!.startsWith(`run_${job.id.slice("job_".length)}_`)).toBe(true);
        expect(h["idempotency-key"]).toBe(h["x-edgecron-run-id"]);
        expect(h["x-edgecron-job-id"]).toBe(job.id);
        expect(h["x-edgecron-attempt"]).toBe("1");
        expect(h["x-edgecron-scheduled-at"]).toMatch(ISO_INSTANT);
        const scheduledAt = scheduledAtOf(hit);
        expect(new Date(scheduledAt).toISOString()).toBe(h["x-edgecron-scheduled-at"]);
        // On time: never early, and not absurdly late.
        const late = hit.receivedAt - scheduledAt;
        expect(late, `hit ${h["x-edgecron-run-id"]} ${late} ms after its instant`).toBeGreaterThanOrEqual(0);
        expect(late, `hit ${h["x-edgecron-run-id"]} ${late} ms after its instant`).toBeLessThan(LATE_BOUND_MS);
      }
    }

    for (const hit of every) {
      expect(hit.headers["x-custom"]).toBe("yes");
      expect(hit.headers["content-type"]).toMatch(/^application\/json/);
      expect(JSON.parse(hit.body)).toEqual({ hello: "world" });
    }
    // On the grid createdAt + k·1s (k ≥ 1), one run per instant, consecutive instants 1 s apart.
    const createdAt = Date.parse(everyJob.createdAt);
    const instants = every.map(scheduledAtOf).sort((a, b) => a - b);
    for (const t of instants) {
      expect(t - createdAt).toBeGreaterThanOrEqual(1_000);
      expect((t - createdAt) % 1_000).toBe(0);
    }
    expect(instants[0]).toBe(createdAt + 1_000);
    for (let i = 1; i < instants.length; i++) expect(instants[i]! - instants[i - 1]!).toBe(1_000);

    expect(at).toHaveLength(1);
    expect(scheduledAtOf(at[0]!)).toBe(atInstant);
    expect(at[0]!.receivedAt).toBeGreaterThanOrEqual(atInstant);
    expect(at[0]!.body).toBe("");

    const runIds = [...every, ...at].map((hit) => hit.headers["x-edgecron-run-id"]);
    expect(new Set(runIds).size).toBe(runIds.length);
  }

  it("records every run the targets saw as succeeded on its first attempt", async () => {
    for (const [job, name] of [
      [everyJob, "every"],
      [atJob, "at"],
    ] as const) {
      const seen = hitsOf(name).map((hit) => hit.headers["x-edgecron-run-id"]!);
      expect(seen.length).toBeGreaterThan(0);
      // The receiver answers before the consumer reports the outcome to the shard: poll briefly.
      const runs = await until(`the runs of ${job.id} to be recorded`, 10_000, async () => {
        const res = await api("GET", `/v1/jobs/${job.id}/runs?limit=200`);
        expect(res.status).toBe(200);
        const byId = new Map<string, any>(res.json.items.map((r: any) => [r.id, r]));
        return seen.every((id) => byId.get(id)?.state === "succeeded") ? byId : undefined;
      }).catch(async (err) => {
        const res = await api("GET", `/v1/jobs/${job.id}/runs?limit=200`);
        throw new Error(`${(err as Error).message}\nruns: ${JSON.stringify(res.json)}`);
      });
      for (const id of seen) {
        const run = runs.get(id);
        expect(run.jobId).toBe(job.id);
        expect(run.trigger).toBe("schedule");
        expect(run.state).toBe("succeeded");
        expect(run.status).toBe(200);
        expect(run.attempts).toBe(1);
        expect(run.error).toBeNull();
        const hit = hitsOf(name).find((h) => h.headers["x-edgecron-run-id"] === id)!;
        expect(run.scheduledAt).toBe(hit.headers["x-edgecron-scheduled-at"]);
      }
    }

    const runId = hitsOf("every")[0]!.headers["x-edgecron-run-id"]!;
    const one = await api("GET", `/v1/runs/${runId}`);
    expect(one.status, JSON.stringify(one.json)).toBe(200);
    expect(one.json.id).toBe(runId);
    expect(one.json.jobId).toBe(everyJob.id);
    expect(one.json.state).toBe("succeeded");
    expect(one.json.attemptLog).toHaveLength(1);
    expect(one.json.attemptLog[0]).toMatchObject({ attempt: 1, outcome: "succeeded", status: 200, error: null });
    expect(one.json.attemptLog[0].durationMs).toBeGreaterThanOrEqual(0);

    const missing = await api("GET", `/v1/runs/run_${everyJob.id.slice(4)}_zzzzzzzz`);
    expect(missing.status).toBe(404);
  });

  it("starts no run of a deleted job after the delete is answered", async () => {
    const deleted = await api("DELETE", `/v1/jobs/${everyJob.id}`);
    const answeredAt = Date.now();
    expect(deleted.status, JSON.stringify(deleted.json)).toBe(200);
    expect(deleted.json).toEqual({ id: everyJob.id, deleted: true });

    await sleep(2_500);
    await explained([{ id: everyJob.id, name: "every" }], async () => {
      const late = hitsOf("every").filter((hit) => hit.receivedAt > answeredAt);
      // A run dispatched before the answer may still reach the target just after it; nothing newer may.
      for (const hit of late) {
        expect(scheduledAtOf(hit), `run ${hit.headers["x-edgecron-run-id"]} fired after the delete`).toBeLessThanOrEqual(answeredAt);
      }
      const last = hitsOf("every").at(-1)!;
      expect(last.receivedAt <= answeredAt || scheduledAtOf(last) <= answeredAt).toBe(true);

      expect((await api("GET", `/v1/jobs/${everyJob.id}`)).status).toBe(404);
      // Its runs stay readable; the one-off job was called exactly once in all.
      expect((await api("GET", `/v1/jobs/${everyJob.id}/runs`)).status).toBe(200);
      expect(hitsOf("at")).toHaveLength(1);
      const runIds = [...hitsOf("every"), ...hitsOf("at")].map((hit) => hit.headers["x-edgecron-run-id"]);
      expect(new Set(runIds).size).toBe(runIds.length);
    });
  });
});

describe("a workflow job under wrangler dev", () => {
  it("runs a diamond a → b, c → d through the local queue, each step receiving its parents' results", async () => {
    const ids = ["a", "b", "c", "d"] as const;
    type Id = (typeof ids)[number];
    const results: Record<Id, unknown> = {
      a: { rows: 3, source: "extract" },
      b: { cleaned: 3 },
      c: { enriched: ["x", "y"] },
      d: { loaded: true },
    };
    const name = (id: Id) => `workflow-${id}`;
    const target = (id: Id) => ({ url: `${receiver!.url}/hit/${name(id)}?body=${encodeURIComponent(JSON.stringify(results[id]))}` });
    const created = await api("POST", "/v1/jobs", {
      name: "e2e-diamond",
      schedule: { cron: "0 0 1 1 *" },
      steps: [
        { id: "a", target: target("a") },
        { id: "b", after: ["a"], target: target("b") },
        { id: "c", after: ["a"], target: target("c") },
        { id: "d", after: ["b", "c"], target: target("d") },
      ],
    });
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    const job = created.json;
    expect(job.steps.map((s: { id: string; after?: string[] }) => [s.id, s.after ?? []])).toEqual([
      ["a", []],
      ["b", ["a"]],
      ["c", ["a"]],
      ["d", ["b", "c"]],
    ]);

    const triggered = await api("POST", `/v1/jobs/${job.id}/trigger`);
    expect(triggered.status, JSON.stringify(triggered.json)).toBe(202);
    const runId: string = triggered.json.id;

    await explained([{ id: job.id, name: name("d") }], async () => {
      const run = await until(`workflow run ${runId} to end`, 30_000, async () => {
        const res = await api("GET", `/v1/runs/${runId}`);
        expect(res.status).toBe(200);
        return ["succeeded", "failed", "cancelled"].includes(res.json.state) ? res.json : undefined;
      });
      expect(run.state, JSON.stringify(run)).toBe("succeeded");
      expect(run.error).toBeNull();
      expect(run.steps.map((s: { id: string; state: string }) => [s.id, s.state])).toEqual(ids.map((id) => [id, "succeeded"]));
      for (const step of run.steps) {
        expect(step.result, `result of step ${step.id}`).toEqual(results[step.id as Id]);
        expect(step).toMatchObject({ attempt: 1, status: 200, error: null });
        expect(step.attemptLog).toHaveLength(1);
        expect(step.attemptLog[0]).toMatchObject({ attempt: 1, outcome: "succeeded", status: 200 });
      }

      const upstream: Record<Id, Partial<Record<Id, unknown>>> = {
        a: {},
        b: { a: results.a },
        c: { a: results.a },
        d: { b: results.b, c: results.c },
      };
      for (const id of ids) {
        const hits = hitsOf(name(id));
        expect(hits, `requests to step ${id}`).toHaveLength(1);
        const [hit] = hits;
        expect(hit!.method).toBe("POST");
        expect(hit!.headers).toMatchObject({
          "x-edgecron-step": id,
          "idempotency-key": `${runId}:${id}`,
          "x-edgecron-run-id": `${runId}.${id}`,
          "x-edgecron-job-id": job.id,
          "x-edgecron-attempt": "1",
        });
        expect(hit!.headers["content-type"]).toMatch(/^application\/json/);
        expect(JSON.parse(hit!.body), `input of step ${id}`).toEqual({ runId, scheduledAt: run.scheduledAt, upstream: upstream[id] });
      }
      // d started only once both its parents had answered.
      const [b, c, d] = (["b", "c", "d"] as const).map((id) => hitsOf(name(id))[0]!);
      expect(d.receivedAt).toBeGreaterThanOrEqual(Math.max(b.receivedAt, c.receivedAt));

      // The job's runs are its workflow runs, not their steps.
      const runs = await api("GET", `/v1/jobs/${job.id}/runs`);
      expect(runs.json.items.map((r: { id: string }) => r.id)).toEqual([runId]);
    });
  });
});
