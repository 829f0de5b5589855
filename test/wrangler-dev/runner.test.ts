import { readdirSync, readFileSync } from "node:fs";
import type { Server } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RUNNER_NAME } from "../../scripts/dev-topology";
import { type Stack, startStack, until } from "../support/local-stack";
import { type Hit, startReceiver } from "../support/receiver";

/**
 * The two-process stack, as `npm start` runs it by default (docs/runner.md): the runner
 * Worker's `wrangler dev` and the scheduler's, joined by the stack's own dev registry. The
 * scheduler consumes nothing (wrangler.toml has no consumers), so a run whose target is called
 * and recorded went scheduler → queue → runner → shard across the two processes.
 */

let stack: Stack | undefined;
let receiver: { url: string; server: Server; hits: Map<string, Hit[]> } | undefined;

beforeAll(async () => {
  receiver = await startReceiver();
  stack = await startStack({ topology: "two" });
});

afterAll(async () => {
  if (receiver) await new Promise<void>((resolve) => receiver!.server.close(() => resolve()));
  await stack?.stop();
});

/** The configs (-c) of each of the stack's `wrangler dev` processes (its outer one: wrangler re-executes itself). */
function wranglerDevConfigs(pgid: number): string[][] {
  const configs: string[][] = [];
  for (const pid of readdirSync("/proc").filter((entry) => /^\d+$/.test(entry))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]) !== pgid) continue;
      const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      if (!argv.some((a) => a.endsWith("wrangler/bin/wrangler.js")) || !argv.includes("dev")) continue;
      configs.push(argv.flatMap((a, i) => (argv[i - 1] === "-c" ? [a] : [])));
    } catch {
      // gone meanwhile
    }
  }
  return configs;
}

describe("the runner as a second wrangler dev", () => {
  it("runs as its own process, registered as the consumer of every queue", () => {
    expect(wranglerDevConfigs(stack!.pgid).sort()).toEqual([["runner/wrangler.toml"], ["wrangler.toml"]]);
    const entry = JSON.parse(readFileSync(join(stack!.dir, "registry", RUNNER_NAME), "utf8"));
    expect(entry.queueConsumers.sort()).toEqual(["edgecron-runs", "edgecron-runs-1", "edgecron-runs-1-dlq", "edgecron-runs-dlq"]);
  });

  it("a job fires, its target is called, and its run is recorded succeeded", async () => {
    const at = new Date(Date.now() + 3_000).toISOString();
    const created = await stack!.api("POST", "/v1/jobs", { schedule: { at }, target: { url: `${receiver!.url}/hit/runner` } });
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    const hits = await until("the target to be called", 60_000, () => receiver!.hits.get("runner")?.slice(), stack);
    expect(hits).toHaveLength(1);
    const runId = hits[0]!.headers["x-edgecron-run-id"];
    const run = await until(
      "the run to be recorded succeeded",
      30_000,
      async () => {
        const r = await stack!.api("GET", `/v1/runs/${runId}`);
        return r.status === 200 && r.json.state === "succeeded" ? r.json : undefined;
      },
      stack,
    );
    expect(run.jobId).toBe(created.json.id);
    expect(run.attempts).toBe(1);
    expect(run.status).toBe(200);
    expect(run.attemptLog?.map((a: { outcome: string }) => a.outcome)).toEqual(["succeeded"]);
  });

  it("a target that answers 202 completes its run through the scheduler with the token the runner signed", async () => {
    const at = new Date(Date.now() + 3_000).toISOString();
    const created = await stack!.api("POST", "/v1/jobs", {
      schedule: { at },
      target: { url: `${receiver!.url}/hit/runner-accepted?status=202` },
      timeoutMs: 60_000,
    });
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    const [hit] = await until("the target to be called", 60_000, () => receiver!.hits.get("runner-accepted")?.slice(), stack);
    const runId = hit!.headers["x-edgecron-run-id"];
    const token = hit!.headers["x-edgecron-completion-token"];
    // The runner signs the shard's token (src/security/completion-tokens.ts) and the scheduler
    // checks it: both must hold the same SIGNING_SECRET. The URL is the scheduler's (PUBLIC_URL).
    expect(token).toMatch(/\.[A-Za-z0-9_-]{43}$/);
    expect(hit!.headers["x-edgecron-complete-url"]).toBe(`http://localhost:${stack!.port}/v1/runs/${runId}/complete`);
    await until(
      "the attempt to be recorded accepted",
      30_000,
      async () => {
        const r = await stack!.api("GET", `/v1/runs/${runId}`);
        return r.json.attemptLog?.at(-1)?.outcome === "accepted" ? true : undefined;
      },
      stack,
    );
    const done = await stack!.api("POST", `/v1/runs/${runId}/complete`, { token, ok: true, result: "done" }, { auth: false });
    expect(done.status, JSON.stringify(done.json)).toBe(200);
    expect(done.json).toMatchObject({ state: "succeeded", result: "done", attempts: 1 });
  });
});
