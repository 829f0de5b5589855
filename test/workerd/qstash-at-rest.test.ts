/**
 * What a QStash message keeps at rest (docs/security.md, "What is encrypted"): its destination,
 * forwarded headers and body are its target's, sealed; its callbacks' URLs and forwarded
 * headers are sealed too, under its tenant, and a URL group's endpoints. The /v2 views open
 * them. Against the real D1.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { readSweepState } from "../../src/catalog/sweep-state";
import type { JobSpec } from "../../src/model/job";
import { jobIdOfMessage } from "../../src/qstash/ids";
import { roundMark } from "../../src/reconcile/resealing";
import { sweep } from "../../src/reconcile/sweep";
import { createTenant, receiverPath } from "./helpers";
import { messageRow } from "./messages";

describe("a QStash message at rest", () => {
  it("seals its destination, its callbacks' URLs and their forwarded headers; GET /v2/messages shows them", async () => {
    const tenant = await createTenant();
    const destination = receiverPath("qstash-rest", "token=destination-secret");
    const callback = receiverPath("qstash-rest-callback", "token=callback-secret");
    const failureCallback = receiverPath("qstash-rest-failure", "token=failure-secret");
    const res = await tenant.api(`/v2/publish/${destination}`, {
      method: "POST",
      headers: {
        "Content-Type": "text/plain",
        "Upstash-Delay": "1h",
        "Upstash-Forward-Authorization": "Bearer forward-secret",
        "Upstash-Callback": callback,
        "Upstash-Callback-Forward-Authorization": "Bearer callback-header-secret",
        "Upstash-Failure-Callback": failureCallback,
      },
      body: "hello",
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const { messageId } = (await res.json()) as { messageId: string };

    // A message is held by its shard alone (docs/qstash.md): its row there is what rests.
    const row = await messageRow(jobIdOfMessage(messageId)!);
    const secrets = ["destination-secret", "callback-secret", "failure-secret", "forward-secret", "callback-header-secret", "/hit/"];
    for (const secret of secrets) expect(row!.spec, secret).not.toContain(secret);
    const meta = (JSON.parse(row!.spec) as JobSpec).target!.qstash!;
    expect(meta.callback).toEqual({ origin: new URL(callback).origin, secrets: expect.objectContaining({ kid: "t1" }) });
    expect(meta.failureCallback).toEqual({ origin: new URL(failureCallback).origin, secrets: expect.objectContaining({ kid: "t1" }) });

    const shown = await tenant.api(`/v2/messages/${messageId}`);
    expect(shown.status).toBe(200);
    expect(await shown.json()).toMatchObject({ messageId, url: destination, callback, failureCallback, body: "hello" });
  });

  it("seals a URL group's endpoints; the group shows them and a publish to it fans out to them", async () => {
    const tenant = await createTenant();
    const url = receiverPath("qstash-group", "token=endpoint-secret");
    const added = await tenant.api("/v2/topics/sealed-group/endpoints", { method: "POST", json: { endpoints: [{ name: "one", url }] } });
    expect(added.status, await added.clone().text()).toBe(200);
    const row = await env.DB.prepare("SELECT endpoints FROM qstash_topics WHERE tenant_id = ? AND name = 'sealed-group'")
      .bind(tenant.id)
      .first<{ endpoints: string }>();
    expect(JSON.parse(row!.endpoints)).toMatchObject({ kid: "t1" });
    expect(row!.endpoints).not.toContain("endpoint-secret");
    expect(await (await tenant.api("/v2/topics/sealed-group")).json()).toMatchObject({ endpoints: [{ name: "one", url }] });
    const published = await tenant.api("/v2/publish/sealed-group", { method: "POST", headers: { "Upstash-Delay": "1h" }, body: "x" });
    expect(published.status, await published.clone().text()).toBe(200);
    expect(await published.json()).toEqual([{ messageId: expect.stringMatching(/^msg_/), url }]);
  });

  it("a deduplicated publish's remembered answer keeps its URL sealed, and answers it whole", async () => {
    const tenant = await createTenant();
    const destination = receiverPath("qstash-dedup", "token=dedup-secret");
    const send = () =>
      tenant.api(`/v2/publish/${destination}`, {
        method: "POST",
        headers: { "Upstash-Delay": "1h", "Upstash-Deduplication-Id": "once" },
        body: "x",
      });
    const first = (await (await send()).json()) as { messageId: string };
    expect(await (await send()).json()).toEqual({ messageId: first.messageId, url: destination, deduplicated: true });
    const row = await env.DB.prepare("SELECT url FROM qstash_dedup WHERE tenant_id = ?").bind(tenant.id).first<{ url: string }>();
    expect(JSON.parse(row!.url)).toMatchObject({ kid: "t1" });
    expect(row!.url).not.toContain("dedup-secret");
  });

  it("a URL group written before endpoints were sealed is sealed by the sweep, and still reads the same", async () => {
    const tenant = await createTenant();
    const endpoints = [{ name: "old", url: receiverPath("qstash-group-old", "token=old-secret") }];
    await env.DB.prepare("INSERT INTO qstash_topics (tenant_id, name, endpoints, created_at, updated_at) VALUES (?, 'old-group', ?, 1, 1)")
      .bind(tenant.id, JSON.stringify(endpoints))
      .run();
    expect(await (await tenant.api("/v2/topics/old-group")).json()).toMatchObject({ endpoints });
    await env.DB.prepare("UPDATE sweep_state SET resealed_under = NULL, reseal_after = '' WHERE id = 1").run();
    await sweep(env);
    const row = await env.DB.prepare("SELECT endpoints FROM qstash_topics WHERE tenant_id = ? AND name = 'old-group'")
      .bind(tenant.id)
      .first<{ endpoints: string }>();
    expect(row!.endpoints).not.toContain("old-secret");
    expect(await (await tenant.api("/v2/topics/old-group")).json()).toMatchObject({ endpoints });
    expect((await readSweepState(env.DB)).reseal).toMatchObject({ under: roundMark("t1"), remaining: 0 });
  });
});
