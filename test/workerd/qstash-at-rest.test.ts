/**
 * What a QStash message keeps at rest (docs/security.md, "What is encrypted"): its destination,
 * forwarded headers and body are its target's, sealed; its callbacks' URLs and forwarded
 * headers are sealed too, under its tenant. The /v2 views open them. Against the real D1.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { JobSpec } from "../../src/model/job";
import { jobIdOfMessage } from "../../src/qstash/ids";
import { createTenant, receiverPath } from "./helpers";

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

    const row = await env.DB.prepare("SELECT spec FROM jobs WHERE id = ?").bind(jobIdOfMessage(messageId)).first<{ spec: string }>();
    const secrets = ["destination-secret", "callback-secret", "failure-secret", "forward-secret", "callback-header-secret", "/hit/"];
    for (const secret of secrets) expect(row!.spec, secret).not.toContain(secret);
    const meta = (JSON.parse(row!.spec) as JobSpec).target!.qstash!;
    expect(meta.callback).toEqual({ origin: new URL(callback).origin, secrets: expect.objectContaining({ kid: "t1" }) });
    expect(meta.failureCallback).toEqual({ origin: new URL(failureCallback).origin, secrets: expect.objectContaining({ kid: "t1" }) });

    const shown = await tenant.api(`/v2/messages/${messageId}`);
    expect(shown.status).toBe(200);
    expect(await shown.json()).toMatchObject({ messageId, url: destination, callback, failureCallback, body: "hello" });
  });
});
