import { createHash } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Client, QstashError, QstashRatelimitError, Receiver } from "@upstash/qstash";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack, until as untilOf } from "../support/local-stack";

/**
 * The /v2 surface driven by the official @upstash/qstash SDK, unchanged, its baseUrl at the
 * real local stack (`wrangler dev` as `npm start` runs it), and a target on 127.0.0.1 that
 * checks every request it gets with the SDK's own Receiver, as a QStash user's endpoint would.
 */

interface Delivery {
  name: string;
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
  /** The body's bytes, base64. */
  raw: string;
  receivedAt: number;
  /** Receiver.verify with the tenant's keys at the time: true, or why not. */
  verified: true | string;
}

let stack: Stack | undefined;
let target: { base: string; server: Server; deliveries: Delivery[] } | undefined;
let client: Client;
let keys: { current: string; next: string };
let apiKey: string;

const until = <T>(what: string, timeoutMs: number, check: () => T | undefined | Promise<T | undefined>) =>
  untilOf(what, timeoutMs, check, stack);
const deliveriesOf = (name: string) => target!.deliveries.filter((d) => d.name === name);
/** The most of a /slow/<name>'s requests the target had open at once. */
const peaks = new Map<string, number>();

/**
 * The target: /ok/<name> answers 200; /fail/<name> 500 (with Retry-After when ?retryAfter=);
 * /fail-once/<name> 500 the first time, then 200; /stop/<name> 489 with Upstash-NonRetryable-Error;
 * /slow/<name> 200 after ?ms= (default 1000), counting how many of <name>'s are open at once (`peaks`).
 * Every request is verified with the SDK's Receiver against the URL it was sent to.
 */
async function startTarget() {
  const deliveries: Delivery[] = [];
  const open = new Map<string, number>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const url = `${base}${req.url}`;
      const parsed = new URL(url);
      const [, kind, name = ""] = parsed.pathname.split("/");
      const body = Buffer.concat(chunks).toString("utf8");
      const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
      let verified: true | string;
      if (process.env.QSTASH_TEST_TRACE) console.log("target got", req.method, req.url);
      try {
        const ok = await new Receiver({ currentSigningKey: keys.current, nextSigningKey: keys.next }).verify({
          signature: headers["upstash-signature"] ?? "",
          body,
          url,
        });
        verified = ok ? true : "Receiver.verify answered false";
      } catch (err) {
        verified = (err as Error).message;
      }
      const raw = Buffer.concat(chunks).toString("base64");
      deliveries.push({ name, method: req.method ?? "", url, headers, body, raw, receivedAt: Date.now(), verified });
      const seen = deliveries.filter((d) => d.name === name).length;
      if (kind === "fail" || (kind === "fail-once" && seen === 1)) {
        const retryAfter = parsed.searchParams.get("retryAfter");
        if (retryAfter) res.setHeader("Retry-After", retryAfter);
        res.statusCode = 500;
        res.end("target failed");
      } else if (kind === "slow") {
        open.set(name, (open.get(name) ?? 0) + 1);
        peaks.set(name, Math.max(peaks.get(name) ?? 0, open.get(name)!));
        setTimeout(
          () => {
            open.set(name, open.get(name)! - 1);
            res.end("ok");
          },
          Number(parsed.searchParams.get("ms") ?? 1000),
        );
      } else if (kind === "stop") {
        res.statusCode = 489;
        res.setHeader("Upstash-NonRetryable-Error", "true");
        res.end("do not retry");
      } else {
        res.end("ok");
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { base, server, deliveries };
}

/** A tenant of its own, with an API key: what a QStash user's token is here. */
async function newTenant(limits?: Record<string, number>): Promise<string> {
  const tenant = await stack!.api("POST", "/v1/tenants", {
    name: `qstash-${Math.random().toString(36).slice(2, 8)}`,
    ...(limits && { limits }),
  });
  expect(tenant.status, JSON.stringify(tenant.json)).toBe(201);
  return tenant.json.apiKey as string;
}

async function qstashError(call: Promise<unknown>): Promise<QstashError> {
  const err = await call.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, "the call should have failed").toBeInstanceOf(QstashError);
  return err as QstashError;
}

async function jobCount(): Promise<number> {
  const listed = await stack!.api("GET", "/v1/jobs?limit=200", undefined, { token: apiKey });
  return listed.json.items.length;
}

beforeAll(async () => {
  target = await startTarget();
  stack = await startStack({ env: { SWEEP_INTERVAL_MS: "5000" } });
  apiKey = await newTenant();
  client = new Client({ baseUrl: stack.base, token: apiKey, retry: false });
  // The query parameter QStash also takes, instead of the Authorization header.
  const res = await fetch(`${stack.base}/v2/keys?qstash_token=${apiKey}`);
  expect(res.status).toBe(200);
  keys = (await res.json()) as typeof keys;
});

afterAll(async () => {
  if (target) await new Promise<void>((resolve) => target!.server.close(() => resolve()));
  await stack?.stop();
});

describe("the @upstash/qstash SDK against /v2", () => {
  it("gets the signing keys, which are the tenant's, and refuses a wrong token in QStash's error shape", async () => {
    expect(keys.current).toMatch(/^whsec_/);
    expect(keys.next).toMatch(/^whsec_/);
    expect(keys.next).not.toBe(keys.current);
    const v1 = await stack!.api("GET", "/v1/signing-keys", undefined, { token: apiKey });
    expect(v1.status, JSON.stringify(v1.json)).toBe(200);
    expect([v1.json.current, v1.json.next]).toEqual([keys.current, keys.next]);

    const wrong = new Client({ baseUrl: stack!.base, token: "ek_not-a-key", retry: false });
    const err = await qstashError(wrong.publishJSON({ url: `${target!.base}/ok/nope`, body: {} }));
    expect(err.status).toBe(401);
    expect(JSON.parse(err.message).error).toMatch(/Authorization/);
  });

  it("publishes with a delay: delivered after it, signed, with QStash's headers, the forwarded ones without their prefix", async () => {
    const url = `${target!.base}/ok/delayed?x=1`;
    const before = Date.now();
    const res = await client.publishJSON({ url, body: { hello: "qstash" }, delay: 2, headers: { "X-Custom": "yes" } });
    expect(res.messageId).toMatch(/^msg_/);
    expect(res.url).toBe(url);
    const [hit] = await until("the delayed message", 20_000, () =>
      deliveriesOf("delayed").length > 0 ? deliveriesOf("delayed") : undefined,
    );
    expect(hit!.receivedAt - before).toBeGreaterThanOrEqual(2_000);
    expect(hit!.verified).toBe(true);
    expect(hit!.method).toBe("POST");
    expect(hit!.url).toBe(url);
    expect(JSON.parse(hit!.body)).toEqual({ hello: "qstash" });
    expect(hit!.headers["content-type"]).toBe("application/json");
    expect(hit!.headers["x-custom"]).toBe("yes");
    expect(hit!.headers["upstash-forward-x-custom"]).toBeUndefined();
    expect(hit!.headers["upstash-message-id"]).toBe(res.messageId);
    expect(hit!.headers["upstash-retried"]).toBe("0");
    expect(hit!.headers["user-agent"]).toBe("Upstash-QStash");
  });

  it("signs so that the Receiver takes the current key or the next one, and refuses other keys", async () => {
    const url = `${target!.base}/ok/keys`;
    await client.publish({ url, body: "plain text", headers: { "Content-Type": "text/plain" } });
    const [hit] = await until("the message", 20_000, () => (deliveriesOf("keys").length > 0 ? deliveriesOf("keys") : undefined));
    expect(hit!.body).toBe("plain text");
    const request = { signature: hit!.headers["upstash-signature"]!, body: hit!.body, url };
    // The JWT's claims, as QStash writes them.
    const claims = JSON.parse(Buffer.from(request.signature.split(".")[1]!, "base64url").toString());
    expect(claims).toMatchObject({ iss: "Upstash", sub: url });
    expect(claims.jti).toEqual(expect.any(String));
    expect(claims.exp).toBeGreaterThan(claims.nbf);
    expect(await new Receiver({ currentSigningKey: "whsec_wrong", nextSigningKey: keys.current }).verify(request)).toBe(true);
    await expect(new Receiver({ currentSigningKey: "whsec_wrong", nextSigningKey: "whsec_other" }).verify(request)).rejects.toThrow();
    await expect(
      new Receiver({ currentSigningKey: keys.current, nextSigningKey: keys.next }).verify({ ...request, body: "tampered" }),
    ).rejects.toThrow(/body hash/);
    await expect(
      new Receiver({ currentSigningKey: keys.current, nextSigningKey: keys.next }).verify({ ...request, url: `${target!.base}/ok/other` }),
    ).rejects.toThrow(/subject/);
  });

  it("repairs a destination whose // a proxy merged, and keeps its query string", async () => {
    const merged = target!.base.replace("http://", "http:/");
    const res = await fetch(`${stack!.base}/v2/publish/${merged}/ok/merged?q=1`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "text/plain" },
      body: "m",
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { url: string }).url).toBe(`${target!.base}/ok/merged?q=1`);
    const hit = await until("the message", 20_000, () => deliveriesOf("merged")[0]);
    expect(hit.url).toBe(`${target!.base}/ok/merged?q=1`);
    expect(hit.verified).toBe(true);
  });

  it("a binary body (not UTF-8) is delivered as its bytes, and the SDK reads it back as bodyBase64", async () => {
    // The SDK's publish takes text; a client with bytes posts them as QStash's HTTP API allows.
    const bytes = Buffer.from([0, 255, 0xc3, 0x28, 1, 2, 3]);
    const res = await fetch(`${stack!.base}/v2/publish/${target!.base}/ok/binary`, {
      method: "POST",
      headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/octet-stream", "Upstash-Delay": "60s" },
      body: bytes,
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const { messageId } = (await res.json()) as { messageId: string };
    expect(await client.messages.get(messageId)).toMatchObject({ bodyBase64: bytes.toString("base64") });
    await client.messages.delete(messageId);

    const now = await fetch(`${stack!.base}/v2/publish/${target!.base}/ok/binary-now`, {
      method: "POST",
      headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/octet-stream" },
      body: bytes,
    });
    expect(now.status, await now.clone().text()).toBe(200);
    const [hit] = await until("the binary message", 20_000, () =>
      deliveriesOf("binary-now").length > 0 ? deliveriesOf("binary-now") : undefined,
    );
    expect(hit!.raw).toBe(bytes.toString("base64"));
    expect(hit!.headers["content-type"]).toBe("application/octet-stream");
    // Upstash-Signature's body claim is the SHA-256 of those bytes.
    const claims = JSON.parse(Buffer.from(hit!.headers["upstash-signature"]!.split(".")[1]!, "base64url").toString());
    expect(claims.body).toBe(createHash("sha256").update(bytes).digest("base64url"));
  });

  it("signs an empty body too, and sends the method asked for", async () => {
    await client.publish({ url: `${target!.base}/ok/empty`, method: "PUT" });
    const [hit] = await until("the message", 20_000, () => (deliveriesOf("empty").length > 0 ? deliveriesOf("empty") : undefined));
    expect(hit!.method).toBe("PUT");
    expect(hit!.body).toBe("");
    expect(hit!.verified).toBe(true);
  });

  it("publishes a batch: a message each, all delivered", async () => {
    const answers = await client.batchJSON([1, 2, 3].map((n) => ({ url: `${target!.base}/ok/batch`, body: { n } })));
    expect(answers).toHaveLength(3);
    expect(new Set(answers.map((a) => (a as { messageId: string }).messageId)).size).toBe(3);
    const hits = await until("3 batch deliveries", 20_000, () => (deliveriesOf("batch").length >= 3 ? deliveriesOf("batch") : undefined));
    expect(hits.map((h) => JSON.parse(h.body).n).sort()).toEqual([1, 2, 3]);
    expect(hits.every((h) => h.verified === true)).toBe(true);
  });

  it("deduplicates by id: the second publish answers the first message", async () => {
    const first = await client.publishJSON({ url: `${target!.base}/ok/dedup`, body: { a: 1 }, deduplicationId: "order-1" });
    const second = await client.publishJSON({ url: `${target!.base}/ok/dedup`, body: { a: 2 }, deduplicationId: "order-1" });
    expect(second.messageId).toBe(first.messageId);
    expect(second.deduplicated).toBe(true);
    expect(first.deduplicated).toBeUndefined();
  });

  it("upserts a queue with a parallelism, enqueues to it, and refuses an unknown queue with nothing created", async () => {
    const queue = client.queue({ queueName: "emails" });
    await queue.upsert({ parallelism: 2 });
    expect(await queue.get()).toMatchObject({ name: "emails", parallelism: 2, paused: false });
    expect((await queue.list()).map((q) => q.name)).toContain("emails");
    const res = await queue.enqueueJSON({ url: `${target!.base}/ok/queued`, body: { q: true } });
    expect(res.messageId).toMatch(/^msg_/);
    await until("the queued message", 20_000, () => (deliveriesOf("queued").length > 0 ? true : undefined));
    expect((await client.messages.get(res.messageId)).queueName).toBe("emails");

    const jobs = await jobCount();
    const err = await qstashError(client.queue({ queueName: "nope" }).enqueueJSON({ url: `${target!.base}/ok/q`, body: {} }));
    expect(err.status).toBe(404);
    expect(err.message).toMatch(/queue/);
    expect(await jobCount()).toBe(jobs);

    // A paused queue holds its messages, those enqueued before the pause and after, until resumed.
    const early = await queue.enqueueJSON({ url: `${target!.base}/ok/held`, body: { early: true }, delay: 4 });
    await queue.pause();
    expect((await queue.get()).paused).toBe(true);
    const late = await queue.enqueueJSON({ url: `${target!.base}/ok/held`, body: { late: true } });
    // Past the early message's time: held, not delivered.
    await new Promise((resolve) => setTimeout(resolve, 5_500));
    expect(deliveriesOf("held")).toHaveLength(0);
    await queue.resume();
    const held = await until("both held messages", 20_000, () => (deliveriesOf("held").length >= 2 ? deliveriesOf("held") : undefined));
    expect(held.map((h) => h.headers["upstash-message-id"]).sort()).toEqual([early.messageId, late.messageId].sort());
    await queue.delete();
    expect((await qstashError(queue.get())).status).toBe(404);
  });

  it("holds a queue's messages to its parallelism: with 1, one at a time, the others counted in its lag", async () => {
    const queue = client.queue({ queueName: "serial" });
    await queue.upsert({ parallelism: 1 });
    // In one batch, so that their dispatches reach the consumer together: without a queue (the
    // control) it calls all three at once.
    const three = (name: string, extra: object) =>
      [0, 1, 2].map((i) => ({ url: `${target!.base}/slow/${name}?ms=1500`, body: { i }, ...extra }));
    await client.batchJSON(three("unqueued", {}));
    await until("the unqueued three", 20_000, () => (deliveriesOf("unqueued").length >= 3 ? true : undefined));
    expect(peaks.get("unqueued")).toBeGreaterThan(1);
    const sent = await client.batchJSON(three("serial", { queueName: "serial" }));
    await until("a lag while the first is delivered", 2_500, async () => ((await queue.get()).lag > 0 ? true : undefined));
    const got = await until("all three", 30_000, () => (deliveriesOf("serial").length >= 3 ? deliveriesOf("serial") : undefined));
    expect(got.map((d) => d.headers["upstash-message-id"]).sort()).toEqual(sent.map((m) => (m as { messageId: string }).messageId).sort());
    expect(peaks.get("serial")).toBe(1);
    // Raising the parallelism holds the messages already enqueued to the new value.
    await queue.upsert({ parallelism: 1 });
    await queue.pause();
    await client.batchJSON(three("raised", { queueName: "serial" }));
    await queue.upsert({ parallelism: 3, paused: false });
    await until("the raised three", 20_000, () => (deliveriesOf("raised").length >= 3 ? true : undefined));
    expect(peaks.get("raised")).toBeGreaterThan(1);
    await queue.delete();
  });

  it("holds messages of one Upstash-Flow-Control-Key to its parallelism, and refuses a bad value with nothing created", async () => {
    const flowControl = { key: "fc-serial", parallelism: 1 };
    await client.batchJSON([0, 1, 2].map((i) => ({ url: `${target!.base}/slow/fc?ms=1000`, body: { i }, flowControl })));
    await until("all three", 30_000, () => (deliveriesOf("fc").length >= 3 ? true : undefined));
    expect(peaks.get("fc")).toBe(1);

    const jobs = await jobCount();
    const res = await fetch(`${stack!.base}/v2/publish/${target!.base}/ok/fc-bad`, {
      method: "POST",
      headers: { Authorization: `Bearer ${apiKey}`, "Upstash-Flow-Control-Key": "k", "Upstash-Flow-Control-Value": "parallelism=0" },
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/Upstash-Flow-Control-Value/);
    // A queue's message is held to the queue's parallelism: flow control of its own is refused.
    const queue = client.queue({ queueName: "emails-fc" });
    await queue.upsert({ parallelism: 2 });
    const both = await qstashError(queue.enqueueJSON({ url: `${target!.base}/ok/fc-bad`, body: {}, flowControl }));
    expect(both.status).toBe(400);
    expect(both.message).toMatch(/Upstash-Flow-Control-Key/);
    expect(await jobCount()).toBe(jobs);
    await queue.delete();
  });

  it("creates, reads, pauses, resumes, upserts and deletes a schedule, which is an edgecron job that fires", async () => {
    const destination = `${target!.base}/ok/scheduled`;
    const { scheduleId } = await client.schedules.create({ destination, cron: "*/2 * * * * *", scheduleId: "every-2s", body: "tick" });
    expect(scheduleId).toBe("every-2s");
    const hit = await until("a fire", 20_000, () => deliveriesOf("scheduled")[0]);
    expect(hit.headers["upstash-schedule-id"]).toBe("every-2s");
    expect(hit.body).toBe("tick");
    expect(hit.verified).toBe(true);

    const got = await client.schedules.get("every-2s");
    expect(got).toMatchObject({ scheduleId: "every-2s", cron: "*/2 * * * * *", destination, isPaused: false, body: "tick" });
    expect((await client.schedules.list()).map((s) => s.scheduleId)).toContain("every-2s");
    // An edgecron job: /v1 lists it.
    const jobs = await stack!.api("GET", "/v1/jobs?limit=200", undefined, { token: apiKey });
    expect(jobs.json.items.some((j: { name: string }) => j.name === "qstash schedule every-2s")).toBe(true);

    await client.schedules.pause({ schedule: "every-2s" });
    expect((await client.schedules.get("every-2s")).isPaused).toBe(true);
    await client.schedules.resume({ schedule: "every-2s" });
    expect((await client.schedules.get("every-2s")).isPaused).toBe(false);

    await client.schedules.create({ destination, cron: "CRON_TZ=Europe/Berlin 0 9 * * *", scheduleId: "every-2s" });
    expect((await client.schedules.get("every-2s")).cron).toBe("CRON_TZ=Europe/Berlin 0 9 * * *");
    const after = await stack!.api("GET", "/v1/jobs?limit=200", undefined, { token: apiKey });
    expect(after.json.items.filter((j: { name: string }) => j.name === "qstash schedule every-2s")).toHaveLength(1);

    await client.schedules.delete("every-2s");
    expect((await qstashError(client.schedules.get("every-2s"))).status).toBe(404);
  });

  it("gets a message, cancels it, and cancels many by id", async () => {
    const url = `${target!.base}/ok/later`;
    const one = await client.publishJSON({ url, body: { later: true }, delay: "1h", retries: 1, headers: { "X-Later": "1" } });
    const message = await client.messages.get(one.messageId);
    expect(message).toMatchObject({ messageId: one.messageId, url, method: "POST", maxRetries: 1, body: JSON.stringify({ later: true }) });
    expect(message.header?.["x-later"]).toEqual(["1"]);
    expect(message.notBefore).toBeGreaterThan(Date.now() + 3_000_000);
    expect(await client.messages.cancel(one.messageId)).toEqual({ cancelled: 1 });
    expect((await qstashError(client.messages.get(one.messageId))).status).toBe(404);

    const many = await Promise.all([1, 2].map(() => client.publishJSON({ url, body: {}, delay: "1h" })));
    expect(await client.messages.deleteMany(many.map((m) => m.messageId))).toBe(2);
    for (const m of many) expect((await qstashError(client.messages.get(m.messageId))).status).toBe(404);
  });

  it("retries with the message's retry delay, honours Retry-After, and ends in the dead letters, which it retries and deletes", async () => {
    const url = `${target!.base}/fail/retried`;
    const res = await client.publishJSON({ url, body: { r: 1 }, retries: 1, retryDelay: "500" });
    const hits = await until("2 attempts", 30_000, () => (deliveriesOf("retried").length >= 2 ? deliveriesOf("retried") : undefined));
    expect(hits.map((h) => h.headers["upstash-retried"])).toEqual(["0", "1"]);
    expect(hits[1]!.receivedAt - hits[0]!.receivedAt).toBeGreaterThanOrEqual(500);
    expect(hits.every((h) => h.headers["upstash-message-id"] === res.messageId && h.verified === true)).toBe(true);

    const dead = await until("the dead letter", 30_000, async () => {
      const { messages } = await client.dlq.listMessages();
      return messages.find((m) => m.messageId === res.messageId);
    });
    expect(dead).toMatchObject({ url, responseStatus: 500, maxRetries: 1 });
    expect((await client.dlq.listMessages({ filter: { responseStatus: 404 } })).messages.map((m) => m.dlqId)).not.toContain(dead.dlqId);

    // Retried: one more attempt now, and it leaves the dead letters until it fails again.
    const retried = await client.dlq.retry(dead.dlqId);
    expect(retried.responses.map((r) => r.messageId)).toEqual([res.messageId]);
    await until("the retried attempt", 30_000, () => (deliveriesOf("retried").length >= 3 ? true : undefined));
    await until("the dead letter again", 30_000, async () => {
      const { messages } = await client.dlq.listMessages();
      return messages.find((m) => m.dlqId === dead.dlqId);
    });
    await client.dlq.delete(dead.dlqId);
    expect((await client.dlq.listMessages()).messages.map((m) => m.dlqId)).not.toContain(dead.dlqId);
    expect((await qstashError(client.dlq.delete(dead.dlqId))).status).toBe(404);

    // Retry-After longer than the retry delay: the retry waits for it.
    await client.publishJSON({ url: `${target!.base}/fail/after?retryAfter=2`, body: {}, retries: 1, retryDelay: "100" });
    const after = await until("2 attempts", 30_000, () => (deliveriesOf("after").length >= 2 ? deliveriesOf("after") : undefined));
    expect(after[1]!.receivedAt - after[0]!.receivedAt).toBeGreaterThanOrEqual(2_000);
  });

  it("sends a 489 with Upstash-NonRetryable-Error straight to the dead letters, which are deleted in bulk", async () => {
    const res = await client.publishJSON({ url: `${target!.base}/stop/stopped`, body: {}, retries: 3 });
    const dead = await until("the dead letter", 30_000, async () => {
      const { messages } = await client.dlq.listMessages();
      return messages.find((m) => m.messageId === res.messageId);
    });
    expect(dead.responseStatus).toBe(489);
    expect(deliveriesOf("stopped")).toHaveLength(1);
    expect(await client.dlq.deleteMany({ dlqIds: [dead.dlqId] })).toEqual({ deleted: 1 });
    const { messages } = await client.dlq.listMessages();
    expect(messages.map((m) => m.dlqId)).not.toContain(dead.dlqId);
  });

  it("fans a URL group's publish out to each endpoint, named in Upstash-Topic-Name", async () => {
    await client.urlGroups.addEndpoints({
      name: "team",
      endpoints: [
        { name: "a", url: `${target!.base}/ok/fan-a` },
        { name: "b", url: `${target!.base}/ok/fan-b` },
      ],
    });
    expect((await client.urlGroups.get("team")).endpoints).toHaveLength(2);
    const answers = await client.publishJSON({ urlGroup: "team", body: { fan: true } });
    expect(answers).toHaveLength(2);
    for (const name of ["fan-a", "fan-b"]) {
      const hit = await until(`the ${name} delivery`, 20_000, () => deliveriesOf(name)[0]);
      expect(hit.headers["upstash-topic-name"]).toBe("team");
      expect(hit.verified).toBe(true);
    }
    await client.urlGroups.removeEndpoints({ name: "team", endpoints: [{ name: "a" }] });
    expect((await client.urlGroups.get("team")).endpoints.map((e) => e.name)).toEqual(["b"]);
    expect((await client.urlGroups.list()).map((g) => g.name)).toContain("team");
    await client.urlGroups.delete("team");
    expect((await qstashError(client.urlGroups.get("team"))).status).toBe(404);
  });

  it("calls the callback with the destination's answer, and the failure callback once the message is dead: both signed messages", async () => {
    const ok = await client.publishJSON({
      url: `${target!.base}/ok/called`,
      body: { cb: 1 },
      callback: `${target!.base}/ok/callback`,
      failureCallback: `${target!.base}/ok/never`,
    });
    const cb = await until("the callback", 20_000, () => deliveriesOf("callback")[0]);
    expect(cb.verified).toBe(true);
    const payload = JSON.parse(cb.body);
    expect(payload).toMatchObject({
      status: 200,
      retried: 0,
      sourceMessageId: ok.messageId,
      url: `${target!.base}/ok/called`,
      method: "POST",
    });
    expect(Buffer.from(payload.body, "base64").toString()).toBe("ok");
    expect(JSON.parse(Buffer.from(payload.sourceBody, "base64").toString())).toEqual({ cb: 1 });
    expect(cb.headers["upstash-message-id"]).not.toBe(ok.messageId);

    const failed = await client.publishJSON({
      url: `${target!.base}/stop/doomed`,
      body: {},
      failureCallback: `${target!.base}/ok/failure`,
    });
    const fcb = await until("the failure callback", 20_000, () => deliveriesOf("failure")[0]);
    expect(fcb.verified).toBe(true);
    const failure = JSON.parse(fcb.body);
    expect(failure).toMatchObject({ status: 489, sourceMessageId: failed.messageId, dlqId: expect.stringMatching(/^run_/) });
    expect(Buffer.from(failure.body, "base64").toString()).toBe("do not retry");
    expect(deliveriesOf("never")).toHaveLength(0);
  });

  it("shows a message's events: created, each attempt, its error and its delivery", async () => {
    const url = `${target!.base}/fail-once/logged`;
    const res = await client.publishJSON({ url, body: {}, retries: 2, retryDelay: "100" });
    await until("2 attempts", 20_000, () => (deliveriesOf("logged").length >= 2 ? true : undefined));
    const logs = await until("the DELIVERED event", 20_000, async () => {
      const page = await client.logs({ messageIds: [res.messageId] });
      return page.logs.some((l) => l.state === "DELIVERED") ? page.logs : undefined;
    });
    expect(logs.every((l) => l.messageId === res.messageId && l.url === url)).toBe(true);
    expect(logs.map((l) => l.state).reverse()).toEqual(["CREATED", "ACTIVE", "ERROR", "ACTIVE", "DELIVERED"]);
    expect(logs.find((l) => l.state === "ERROR")?.error).toMatch(/500/);
    const filtered = await client.logs({ filter: { url, state: "DELIVERED" } });
    expect(filtered.logs.map((l) => l.messageId)).toEqual([res.messageId]);
  });

  it("answers bad input with a 400 naming the header, and creates nothing", async () => {
    const jobs = await jobCount();
    const cases: Array<[() => Promise<unknown>, RegExp]> = [
      [() => client.publishJSON({ url: `${target!.base}/ok/bad`, body: {}, delay: "soon" as "1s" }), /Upstash-Delay/],
      [() => client.publishJSON({ url: `${target!.base}/ok/bad`, body: {}, retryDelay: "2 ** retried (" }), /Upstash-Retry-Delay/],
      [() => client.publishJSON({ url: `${target!.base}/ok/bad`, body: {}, retries: 100 }), /Upstash-Retries/],
      [
        () => client.publishJSON({ url: `${target!.base}/ok/bad`, body: {}, flowControl: { key: "k", parallelism: 0 } as never }),
        /Flow-Control/,
      ],
      [() => client.publishJSON({ url: "not a url at all!", body: {} }), /destination/],
      [() => client.schedules.create({ destination: `${target!.base}/ok/bad`, cron: "every day" }), /Upstash-Cron/],
      [
        () =>
          client.batchJSON([
            { url: `${target!.base}/ok/bad`, body: {} },
            { url: `${target!.base}/ok/bad`, body: {}, delay: "x" as "1s" },
          ]),
        /Upstash-Delay/,
      ],
    ];
    for (const [call, header] of cases) {
      const err = await qstashError(call());
      expect(err.status, err.message).toBe(400);
      expect(JSON.parse(err.message).error).toMatch(header);
    }
    // A schedule would be a job; a message is held by its shard, and would show in the logs.
    expect(await jobCount()).toBe(jobs);
    expect((await client.logs({ filter: { url: `${target!.base}/ok/bad` } })).logs).toEqual([]);
  });

  it("keeps each tenant to its own messages and schedules", async () => {
    const other = new Client({ baseUrl: stack!.base, token: await newTenant(), retry: false });
    const mine = await client.publishJSON({ url: `${target!.base}/ok/mine`, body: {}, delay: "1h" });
    await client.schedules.create({ destination: `${target!.base}/ok/mine`, cron: "0 0 1 1 *", scheduleId: "private" });
    expect((await qstashError(other.messages.get(mine.messageId))).status).toBe(404);
    expect((await qstashError(other.schedules.get("private"))).status).toBe(404);
    expect((await other.schedules.list()).map((s) => s.scheduleId)).not.toContain("private");
    expect((await qstashError(other.messages.cancel(mine.messageId))).status).toBe(404);
    expect((await client.messages.get(mine.messageId)).messageId).toBe(mine.messageId);
  });

  it("answers a tenant over its request rate with the 429 the SDK reads", async () => {
    const limited = new Client({ baseUrl: stack!.base, token: await newTenant({ requestsPerSecond: 1 }), retry: false });
    const results = await Promise.allSettled([1, 2, 3, 4].map(() => limited.schedules.list()));
    const refused = results.find((r) => r.status === "rejected");
    expect(refused, "some of 4 calls at once should exceed 1 request a second").toBeDefined();
    const err = (refused as PromiseRejectedResult).reason;
    expect(err).toBeInstanceOf(QstashRatelimitError);
    expect(err.limit).toBe("1");
    expect(err.remaining).toBe("0");
    expect(Number(err.reset)).toBeGreaterThan(Date.now() / 1000 - 1);
  });
});
