/**
 * The `qstash_token` query parameter is a credential (QStash's, kept for its clients): a request
 * that authenticates with it leaves it nowhere edgecron writes. Not in a message's destination,
 * the request delivered, its run, the catalog or a shard, an audit entry, an answer or a log line.
 */
import { env, runInDurableObject, SELF } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { jobIdOfMessage } from "../../src/qstash/ids";
import type { Shard } from "../../src/shard/shard";
import { createTenant, hitsOf, receiverPath, shardOf } from "./helpers";
import { messageShard } from "./messages";

const logLines: string[] = [];
let key = "";

beforeAll(() => {
  for (const level of ["log", "info", "warn", "error", "debug"] as const) {
    vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
      logLines.push(
        args.map((a) => (a instanceof Error ? `${a.message} ${a.stack}` : typeof a === "string" ? a : JSON.stringify(a))).join(" "),
      );
    });
  }
});
afterAll(() => vi.restoreAllMocks());

/** A /v2 call authenticated by the query parameter alone, as a QStash client may send it. */
async function withToken(path: string, init: RequestInit = {}): Promise<{ status: number; text: string }> {
  const sep = path.includes("?") ? "&" : "?";
  const res = await SELF.fetch(`https://edgecron.test${path}${sep}qstash_token=${key}`, init);
  const text = await res.text();
  return { status: res.status, text: [...res.headers].map(([k, v]) => `${k}: ${v}`).join("\n") + text };
}

describe("qstash_token", () => {
  it("authenticates, and is kept nowhere: destination, delivery, run, catalog, shard, audit, answers, logs", async () => {
    const tenant = await createTenant();
    key = tenant.apiKey;
    const answers: string[] = [];
    const dest = receiverPath("qstash-token", "a=1");
    const callback = receiverPath("qstash-token-callback");
    // The token among the destination's own parameters: those are the destination's, the token is not.
    const published = await withToken(`/v2/publish/${dest}&b=2`, {
      method: "POST",
      headers: { "Content-Type": "text/plain", "Upstash-Retries": "0", "Upstash-Callback": callback, "Upstash-Forward-X-Team": "t" },
      body: "hello",
    });
    answers.push(published.text);
    expect(published.status, published.text).toBe(200);
    const messageId = (JSON.parse(published.text.slice(published.text.indexOf("{"))) as { messageId: string }).messageId;

    const queue = await withToken("/v2/queues", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: '{"queueName":"tq"}',
    });
    expect(queue.status, queue.text).toBe(200);
    const enqueued = await withToken(`/v2/enqueue/tq/${receiverPath("qstash-token-q")}`, { method: "POST", body: "x" });
    expect(enqueued.status, enqueued.text).toBe(200);
    const scheduled = await withToken(`/v2/schedules/${receiverPath("qstash-token-s")}`, {
      method: "POST",
      headers: { "Upstash-Cron": "0 0 1 1 *" },
      body: "s",
    });
    expect(scheduled.status, scheduled.text).toBe(200);
    const refused = await withToken("/v2/publish/not a url", { method: "POST", body: "x" });
    expect(refused.status).toBe(400);
    answers.push(queue.text, enqueued.text, scheduled.text, refused.text);
    for (const path of [`/v2/messages/${messageId}`, "/v2/schedules", "/v2/queues", `/v2/events?messageIds=${messageId}`]) {
      const read = await withToken(path);
      expect(read.status, path).toBe(200);
      answers.push(read.text);
    }

    const url = new URL(dest);
    const hits = await vi.waitFor(
      async () => {
        const list = await hitsOf(dest);
        expect(list).toHaveLength(1);
        return list;
      },
      { timeout: 15_000, interval: 100 },
    );
    expect(new URL(hits[0]!.url).searchParams.get("a")).toBe("1");
    expect(new URL(hits[0]!.url).searchParams.get("b")).toBe("2");
    expect(new URL(hits[0]!.url).pathname).toBe(url.pathname);
    // Its callback carries the request as it was sent: the destination and its headers.
    const callbacks = await vi.waitFor(
      async () => {
        const list = await hitsOf(callback);
        expect(list).toHaveLength(1);
        return list;
      },
      { timeout: 15_000, interval: 100 },
    );

    const d1Tables = (
      await env.DB.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite%'",
      ).all<{ name: string }>()
    ).results.map((r) => r.name);
    const catalog: string[] = [];
    for (const table of d1Tables) catalog.push(JSON.stringify((await env.DB.prepare(`SELECT * FROM "${table}"`).all()).results));
    const shard = await runInDurableObject(shardOf(messageShard(jobIdOfMessage(messageId)!)), (_s: Shard, state) => {
      const tables = state.storage.sql
        .exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite%'")
        .toArray()
        .map((r) => String(r.name));
      return tables.map((t) => JSON.stringify(state.storage.sql.exec(`SELECT * FROM "${t}"`).toArray())).join("\n");
    });
    const places: Array<[string, string]> = [
      ["an answer", answers.join("\n")],
      ["the request delivered", JSON.stringify(hits)],
      ["its callback", JSON.stringify(callbacks)],
      ["the catalog (D1), audit log included", catalog.join("\n")],
      ["the message's shard", shard],
      ["a log line", logLines.join("\n")],
    ];
    expect(catalog.join("\n")).toContain(tenant.id);
    for (const [where, text] of places) expect(text.includes(key), `the token in ${where}`).toBe(false);
  });
});
