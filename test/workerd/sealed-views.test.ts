/**
 * What each scope is shown of what is sealed at rest (docs/security.md, "What each scope
 * sees"): a `write` key sees target URLs, header values, bodies, notification and callback URLs
 * whole; a `read` key sees origins, header names and a body's size and hash, on every route it
 * may call, /v1 and /v2. And /v2's dead letters are QStash messages' only: a /v1 job's dead run,
 * its headers with it, is not shown there. Against the real D1, shards, Queue and the loopback
 * receiver.
 */
import { env } from "cloudflare:test";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { api, createJob, createTenant, FAR_CRON, receiverPath, waitForRun } from "./helpers";

type Tenant = Awaited<ReturnType<typeof createTenant>>;
type Call = Tenant["api"];

const uid = () => crypto.randomUUID().replace(/-/g, "");

async function keyOf(tenant: Tenant, scopes: string[]): Promise<Call> {
  const res = await tenant.api(`/v1/tenants/${tenant.id}/keys`, { method: "POST", json: { scopes } });
  expect(res.status, await res.clone().text()).toBe(201);
  const { apiKey } = (await res.json()) as { apiKey: string };
  return (path, init = {}) =>
    api(path, { ...init, headers: { ...Object.fromEntries(new Headers(init.headers)), Authorization: `Bearer ${apiKey}` } });
}

/** Triggers a job whose target answers 500 with one attempt, and waits for its run to die. */
async function deadRun(as: Call, jobId: string): Promise<string> {
  const res = await as(`/v1/jobs/${jobId}/trigger`, { method: "POST" });
  expect(res.status, await res.clone().text()).toBe(202);
  const { id } = (await res.json()) as { id: string };
  await waitForRun(id, ["dead"]);
  return id;
}

async function textOf(as: Call, path: string): Promise<string> {
  const res = await as(path);
  const text = await res.text();
  expect(res.status, `${path}: ${text}`).toBe(200);
  return text;
}

/** Every secret in `secrets` absent from each path's answer (its whole text, not a field). */
async function expectNoneIn(as: Call, paths: string[], secrets: string[]): Promise<void> {
  for (const path of paths) {
    const text = await textOf(as, path);
    for (const secret of secrets) expect(text, `${path} shows ${secret}`).not.toContain(secret);
  }
}

describe("/v2/dlq", () => {
  it("shows QStash messages only: a /v1 job's dead run is neither listed nor shown, nor its Authorization header", async () => {
    const tenant = await createTenant({ requestsPerSecond: null });
    const write = await keyOf(tenant, ["write"]);
    const credential = `Bearer v1-dead-${uid()}`;
    const job = await createJob(
      {
        name: "v1-dead",
        schedule: FAR_CRON,
        target: { url: receiverPath("v1-dead", "status=500"), headers: { Authorization: credential } },
        retry: { maxAttempts: 1 },
      },
      write,
    );
    const runId = await deadRun(write, job.id);
    // /v1 has it: it is a dead letter of the job.
    const v1 = (await (await write("/v1/dead-letters")).json()) as { items: Array<{ id: string }> };
    expect(v1.items.map((r) => r.id)).toContain(runId);

    // A QStash message's dead letter is still shown beside it.
    const published = await write(`/v2/publish/${receiverPath("v2-dead", "status=500")}`, {
      method: "POST",
      headers: { "Upstash-Retries": "0", "Content-Type": "text/plain" },
      body: "hi",
    });
    expect(published.status, await published.clone().text()).toBe(200);
    const { messageId } = (await published.json()) as { messageId: string };
    const listed = await vi.waitFor(
      async () => {
        const text = await textOf(write, "/v2/dlq");
        const { messages } = JSON.parse(text) as { messages: Array<{ dlqId: string; messageId: string }> };
        expect(messages.map((m) => m.messageId)).toContain(messageId);
        return { text, messages };
      },
      { timeout: 15_000, interval: 200 },
    );
    expect(listed.messages.map((m) => m.dlqId)).not.toContain(runId);
    expect(listed.text).not.toContain(credential);
    expect(listed.text).not.toContain(job.id);

    const one = await write(`/v2/dlq/${runId}`);
    expect(one.status).toBe(404);
    expect(await one.text()).not.toContain(credential);
    expect((await write(`/v2/dlq/${runId}`, { method: "DELETE" })).status).toBe(404);
    const retried = await write(`/v2/dlq/retry?dlqIds=${runId}`, { method: "POST" });
    expect(await retried.json()).toEqual({ responses: [] });
    // Still /v1's dead letter, untouched.
    expect((await waitForRun(runId, ["dead"])).attempts).toBe(1);
  });
});
