import { createExecutionContext, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../src/index";
import { FAR_CRON, TOKEN } from "./helpers";

/** The Worker as deployed, but with one var set wrong: each request gets its own env object. */
async function createJobWith(vars: Record<string, string>): Promise<Response> {
  const request = new Request("https://edgecron.test/v1/jobs", {
    method: "POST",
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: JSON.stringify({ schedule: FAR_CRON, target: { url: "https://example.com/hook" } }),
  });
  return worker.fetch(request, { ...env, ...vars }, createExecutionContext());
}

describe("a misconfigured Worker", () => {
  it.each([
    ["SHARD_COUNT", "0"],
    ["ALLOW_PRIVATE_TARGETS", "yes"],
    ["PUBLIC_URL", "not a url"],
    ["CLAIM_TIMEOUT_MS", "1m"],
  ])("%s=%j: 500 misconfigured, naming the variable, and no job created", async (name, value) => {
    const jobs = () => env.DB.prepare("SELECT COUNT(*) AS n FROM jobs").first<number>("n");
    const before = await jobs();
    const res = await createJobWith({ [name]: value });
    expect(res.status).toBe(500);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("misconfigured");
    expect(body.error.message).toMatch(new RegExp(`^the server is misconfigured: ${name}: `));
    expect(await jobs()).toBe(before);
  });

  it("the same request succeeds once the settings are right", async () => {
    expect((await createJobWith({})).status).toBe(201);
  });
});
