/**
 * Names and ids in /v2 paths as a caller may mistype them: a stray `%` (no escape after it) is
 * bad input, answered with a 400 (a 404 where the name is merely unknown) that names it, never a
 * 500, and nothing is made.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { createTenant, receiverPath } from "./helpers";

describe("a stray % in a /v2 path", () => {
  const ROUTES: Array<[string, string, RegExp]> = [
    ["GET", "/v2/queues/bad%name", /queue/],
    ["DELETE", "/v2/queues/bad%zz", /queue/],
    ["POST", "/v2/queues/bad%/pause", /queue/],
    ["POST", "/v2/queues/bad%/resume", /queue/],
    ["GET", "/v2/topics/bad%name", /name/],
    ["DELETE", "/v2/topics/bad%", /name/],
    ["GET", "/v2/schedules/scd%", /schedule/],
    ["DELETE", "/v2/schedules/scd%zz", /schedule/],
    ["POST", "/v2/schedules/scd%/pause", /schedule/],
    ["GET", "/v2/messages/msg%", /message/],
    ["GET", "/v2/dlq/run%", /dead letter|dlq/],
  ];

  it.each(ROUTES)("%s %s is a 4xx naming what is wrong", async (method, path, names) => {
    const tenant = await createTenant();
    const res = await tenant.api(path, { method });
    const text = await res.text();
    expect([400, 404], `${res.status} ${text}`).toContain(res.status);
    expect(JSON.parse(text).error).toMatch(names);
  });

  it("enqueueing to a queue whose name has a stray % is a 400 naming the queue, and makes no message", async () => {
    const tenant = await createTenant();
    const url = receiverPath("stray-percent");
    const res = await tenant.api(`/v2/enqueue/bad%zzq/${url}`, { method: "POST", headers: { "Content-Type": "text/plain" }, body: "x" });
    const text = await res.text();
    expect(res.status, text).toBe(400);
    expect(JSON.parse(text).error).toMatch(/^queue: "bad%zzq" is not a queue name/);
    const runs = await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = ?").bind(tenant.id).first<{ n: number }>();
    expect(runs!.n).toBe(0);
  });

  it("an upsert of a queue named with a % is a 400 naming queueName", async () => {
    const tenant = await createTenant();
    const res = await tenant.api("/v2/queues", { method: "POST", json: { queueName: "a%b", parallelism: 1 } });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/^queueName: /);
  });
});
