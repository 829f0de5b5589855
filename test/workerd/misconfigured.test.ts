import { createExecutionContext, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../src/index";
import { FAR_CRON, TOKEN } from "./helpers";

/** The Worker as deployed, but with one var (or binding) set wrong: each request gets its own env object. */
async function createJobWith(vars: Record<string, unknown>): Promise<Response> {
  const request = new Request("https://edgecron.test/v1/jobs", {
    method: "POST",
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: JSON.stringify({ schedule: FAR_CRON, target: { url: "https://example.com/hook" } }),
  });
  return worker.fetch(request, { ...env, ...vars } as Env, createExecutionContext());
}

describe("a misconfigured Worker", () => {
  it.each([
    ["SHARD_COUNT", "0", {}],
    ["ALLOW_PRIVATE_TARGETS", "yes", {}],
    ["PUBLIC_URL", "not a url", {}],
    ["CLAIM_TIMEOUT_MS", "1m", {}],
    ["DISPATCH_QUEUES", "RUNS,RUNS_9", {}],
    ["DISPATCH_QUEUES", "RUNS RUNS_1", {}],
    // The var is right; the binding it names is missing from wrangler.toml.
    ["DISPATCH_QUEUES", "RUNS,RUNS_1", { RUNS_1: undefined }],
  ])("%s=%j: 500 misconfigured, naming the variable, and no job created", async (name, value, bindings) => {
    const jobs = () => env.DB.prepare("SELECT COUNT(*) AS n FROM jobs").first<number>("n");
    const before = await jobs();
    const res = await createJobWith({ [name]: value, ...bindings });
    expect(res.status).toBe(500);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("misconfigured");
    expect(body.error.message).toMatch(new RegExp(`^the server is misconfigured: ${name}: `));
    expect(await jobs()).toBe(before);
  });

  it("the same request succeeds once the settings are right", async () => {
    expect((await createJobWith({})).status).toBe(201);
  });

  it("a Worker with RUNS alone and no DISPATCH_QUEUES, as deployed before there were several, is not misconfigured", async () => {
    expect((await createJobWith({ DISPATCH_QUEUES: undefined, RUNS_1: undefined })).status).toBe(201);
  });
});
