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

describe("what a read key sees of what is sealed", () => {
  let tenant: Tenant;
  let read: Call;
  let write: Call;
  const query = `query-${uid()}`;
  const header = `Bearer header-${uid()}`;
  const body = `body-${uid()}`;
  const notifyKey = `notify-${uid()}`;
  const tenantNotifyKey = `tenant-notify-${uid()}`;
  let targetUrl = "";
  let jobId = "";
  let runId = "";
  /** What the read key must never see: each secret, and the URL's path (origin only). */
  let secrets: string[] = [];

  beforeAll(async () => {
    tenant = await createTenant({ requestsPerSecond: null });
    read = await keyOf(tenant, ["read"]);
    write = await keyOf(tenant, ["write"]);
    targetUrl = receiverPath("sealed-view", `token=${query}&status=500`);
    const notified = await tenant.api(`/v1/tenants/${tenant.id}`, {
      method: "PATCH",
      json: { notify: { url: receiverPath("tenant-notify", `key=${tenantNotifyKey}`), on: ["dead"] } },
    });
    expect(notified.status, await notified.clone().text()).toBe(200);
    const job = await createJob(
      {
        name: "sealed-view",
        schedule: FAR_CRON,
        target: { url: targetUrl, method: "POST", headers: { Authorization: header }, body: { secret: body } },
        retry: { maxAttempts: 1 },
        notify: { url: receiverPath("job-notify", `key=${notifyKey}`), on: ["dead"] },
      },
      write,
    );
    jobId = job.id;
    runId = await deadRun(write, jobId);
    secrets = [query, header, body, notifyKey, tenantNotifyKey, new URL(targetUrl).pathname];
  });

  it("a write key sees them whole (they are there to be hidden)", async () => {
    const job = await textOf(write, `/v1/jobs/${jobId}`);
    for (const secret of [query, body, notifyKey, new URL(targetUrl).pathname]) expect(job).toContain(secret);
    expect(await textOf(write, `/v1/tenants/${tenant.id}`)).toContain(tenantNotifyKey);
  });

  it("/v1: the job, the job list, the tenant, its runs and dead letters show a read key no secret", async () => {
    await expectNoneIn(
      read,
      [
        `/v1/jobs/${jobId}`,
        "/v1/jobs",
        `/v1/tenants/${tenant.id}`,
        `/v1/jobs/${jobId}/runs`,
        `/v1/runs/${runId}`,
        `/v1/jobs/${jobId}/explain`,
        "/v1/dead-letters",
        `/v1/dead-letters?jobId=${jobId}`,
      ],
      secrets,
    );
    // What it sees instead: the origin, the header's name, the body's size and hash, marked reduced.
    const job = (await (await read(`/v1/jobs/${jobId}`)).json()) as {
      target: Record<string, unknown>;
      notify: Record<string, unknown>;
    };
    const sent = new TextEncoder().encode(JSON.stringify({ secret: body }));
    const sha = [...new Uint8Array(await crypto.subtle.digest("SHA-256", sent))].map((b) => b.toString(16).padStart(2, "0")).join("");
    expect(job.target).toEqual({
      url: env.RECEIVER_URL,
      method: "POST",
      headerNames: ["Authorization"],
      bodyBytes: sent.byteLength,
      bodySha256: sha,
      reduced: true,
    });
    expect(job.notify).toEqual({ url: env.RECEIVER_URL, on: ["dead"], reduced: true });
    const shown = (await (await read(`/v1/tenants/${tenant.id}`)).json()) as { notify: unknown };
    expect(shown.notify).toEqual({ url: env.RECEIVER_URL, on: ["dead"], reduced: true });
  });

  it("/v2: messages, schedules, dead letters, events and URL groups show a read key no secret", async () => {
    const v2 = {
      query: `v2-query-${uid()}`,
      header: `Bearer v2-header-${uid()}`,
      body: `v2-body-${uid()}`,
      callback: `v2-callback-${uid()}`,
      endpoint: `v2-endpoint-${uid()}`,
    };
    const destination = receiverPath("v2-sealed", `token=${v2.query}&status=500`);
    const headers = {
      "Content-Type": "text/plain",
      "Upstash-Forward-Authorization": v2.header,
      "Upstash-Failure-Callback": receiverPath("v2-callback", `key=${v2.callback}`),
      "Upstash-Retries": "0",
    };
    const publish = async (extra: Record<string, string>) => {
      const res = await write(`/v2/publish/${destination}`, { method: "POST", headers: { ...headers, ...extra }, body: v2.body });
      expect(res.status, await res.clone().text()).toBe(200);
      return ((await res.json()) as { messageId: string }).messageId;
    };
    const waiting = await publish({ "Upstash-Delay": "1h" });
    const dying = await publish({});
    const scheduled = await write(`/v2/schedules/${destination}`, {
      method: "POST",
      headers: { ...headers, "Upstash-Cron": "0 0 1 1 *" },
      body: v2.body,
    });
    expect(scheduled.status, await scheduled.clone().text()).toBe(200);
    const { scheduleId } = (await scheduled.json()) as { scheduleId: string };
    const group = `sealed-${uid()}`;
    const grouped = await write(`/v2/topics/${group}/endpoints`, {
      method: "POST",
      json: { endpoints: [{ name: "a", url: receiverPath("v2-endpoint", `key=${v2.endpoint}`) }] },
    });
    expect(grouped.status, await grouped.clone().text()).toBe(200);
    const dlqId = await vi.waitFor(
      async () => {
        const { messages } = JSON.parse(await textOf(write, "/v2/dlq")) as { messages: Array<{ dlqId: string; messageId: string }> };
        const found = messages.find((m) => m.messageId === dying);
        expect(found).toBeDefined();
        return found!.dlqId;
      },
      { timeout: 15_000, interval: 200 },
    );
    // The write key sees the message whole.
    const whole = await textOf(write, `/v2/messages/${waiting}`);
    for (const secret of [v2.query, v2.header, v2.body, v2.callback]) expect(whole).toContain(secret);
    expect(await textOf(write, `/v2/topics/${group}`)).toContain(v2.endpoint);

    const hidden = [...Object.values(v2), new URL(destination).pathname];
    await expectNoneIn(
      read,
      [
        `/v2/messages/${waiting}`,
        "/v2/schedules",
        `/v2/schedules/${scheduleId}`,
        "/v2/dlq",
        `/v2/dlq/${dlqId}`,
        "/v2/events",
        `/v2/events?messageId=${dying}`,
        "/v2/topics",
        `/v2/topics/${group}`,
      ],
      hidden,
    );
    const message = (await (await read(`/v2/messages/${waiting}`)).json()) as Record<string, unknown>;
    expect(message).toMatchObject({
      url: env.RECEIVER_URL,
      header: { authorization: ["[redacted]"] },
      failureCallback: env.RECEIVER_URL,
      bodyBytes: new TextEncoder().encode(v2.body).byteLength,
      bodySha256: expect.stringMatching(/^[0-9a-f]{64}$/),
      reduced: true,
    });
    expect(message).not.toHaveProperty("body");
  });
});

describe("a job's answer at creation", () => {
  /** Jobs with each part that is sealed at rest: headers and a JSON body, a base64 body, a workflow's steps, a notification URL. */
  const bodies = () => [
    {
      schedule: FAR_CRON,
      target: {
        url: receiverPath("given", "a=1"),
        method: "PUT",
        headers: { Authorization: `Bearer ${uid()}`, "X-Two": "2" },
        body: { n: 1 },
      },
      notify: { url: receiverPath("given-notify"), on: ["dead"] },
      breaker: false,
    },
    { schedule: FAR_CRON, target: { url: receiverPath("given-b64"), bodyBase64: btoa("raw bytes") }, breaker: false },
    {
      schedule: FAR_CRON,
      steps: [
        { id: "a", target: { url: receiverPath("given-step-a"), body: "text" } },
        { id: "b", after: ["a"], target: { url: receiverPath("given-step-b"), headers: { "X-Step": uid() } } },
      ],
      breaker: false,
    },
  ];
  const sealedParts = (job: Record<string, unknown>) => ({ target: job.target, steps: job.steps, notify: job.notify });

  it("shows what was sealed exactly as a read of the job shows it, one at a time and in a batch", async () => {
    const tenant = await createTenant({ requestsPerSecond: null });
    for (const as of [tenant.api, await keyOf(tenant, ["write"])]) {
      for (const body of bodies()) {
        const created = (await createJob(body, as)) as unknown as Record<string, unknown>;
        expect(created.target ?? created.steps).toBeDefined();
        const read = JSON.parse(await textOf(as, `/v1/jobs/${created.id}`)) as Record<string, unknown>;
        expect(sealedParts(created)).toEqual(sealedParts(read));
      }
      const res = await as("/v1/jobs/batch", { method: "POST", json: { jobs: bodies() } });
      expect(res.status, await res.clone().text()).toBe(200);
      const { results } = (await res.json()) as { results: Array<{ status: number; job: Record<string, unknown> }> };
      for (const { status, job } of results) {
        expect(status).toBe(201);
        const read = JSON.parse(await textOf(as, `/v1/jobs/${job.id}`)) as Record<string, unknown>;
        expect(sealedParts(job)).toEqual(sealedParts(read));
      }
    }
  });
});
