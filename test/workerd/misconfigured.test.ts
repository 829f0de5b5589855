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

  it.each([
    ["API_TOKEN", { API_TOKEN: "short-admin-token" }, TOKEN],
    ["API_TOKEN_NEXT", { API_TOKEN_NEXT: "short-next" }, TOKEN],
    // Guessable by its length alone, whichever token the caller presents.
    ["API_TOKEN", { API_TOKEN: "x".repeat(31), API_TOKEN_NEXT: undefined }, "x".repeat(31)],
  ])("an admin token shorter than 32 characters (%s): 500 misconfigured naming it, never accepted", async (name, vars, presented) => {
    const jobs = () => env.DB.prepare("SELECT COUNT(*) AS n FROM jobs").first<number>("n");
    const before = await jobs();
    const request = new Request("https://edgecron.test/v1/jobs", {
      method: "POST",
      headers: { Authorization: `Bearer ${presented}`, "Content-Type": "application/json" },
      body: JSON.stringify({ schedule: FAR_CRON, target: { url: "https://example.com/hook" } }),
    });
    const res = await worker.fetch(request, { ...env, ...vars } as Env, createExecutionContext());
    expect(res.status).toBe(500);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error).toMatchObject({ code: "misconfigured" });
    expect(body.error.message).toBe(`the server is misconfigured: ${name}: must be at least 32 characters long (it is the admin token)`);
    expect(body.error.message).not.toContain(vars[name as keyof typeof vars] ?? "\0");
    expect(await jobs()).toBe(before);
  });

  it("without API_TOKEN_NEXT, the admin token alone works", async () => {
    expect((await createJobWith({ API_TOKEN_NEXT: undefined })).status).toBe(201);
    expect((await createJobWith({ API_TOKEN_NEXT: "" })).status).toBe(201);
  });

  it("the same request succeeds once the settings are right", async () => {
    expect((await createJobWith({})).status).toBe(201);
  });

  it("a Worker with RUNS alone and no DISPATCH_QUEUES, as deployed before there were several, is not misconfigured", async () => {
    expect((await createJobWith({ DISPATCH_QUEUES: undefined, RUNS_1: undefined })).status).toBe(201);
  });
});
