import { Receiver } from "@upstash/qstash";
import { describe, expect, it } from "vitest";
import { qstashOutcome, upstashHeaders } from "../../src/qstash/delivery";
import { upstashSignature } from "../../src/qstash/signature";

const KEYS = { currentSigningKey: "whsec_current-key", nextSigningKey: "whsec_next-key" };
const URL_ = "https://example.com/hook?x=1";

/** SHA-256 of zero bytes, base64url (the well-known e3b0c442…b855 in hex). */
const EMPTY_SHA256 = "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU";

describe("Upstash-Signature, checked by the SDK's own Receiver", () => {
  it("verifies with the current key, or with the next one when the Receiver's current is another", async () => {
    const signature = await upstashSignature(KEYS.currentSigningKey, URL_, '{"a":1}', Date.now());
    expect(await new Receiver(KEYS).verify({ signature, body: '{"a":1}', url: URL_ })).toBe(true);
    const rotated = { currentSigningKey: "whsec_older", nextSigningKey: KEYS.currentSigningKey };
    expect(await new Receiver(rotated).verify({ signature, body: '{"a":1}', url: URL_ })).toBe(true);
  });

  it("is refused with other keys, another body, another URL, or once expired", async () => {
    const signature = await upstashSignature(KEYS.currentSigningKey, URL_, "body", Date.now());
    await expect(new Receiver({ currentSigningKey: "a", nextSigningKey: "b" }).verify({ signature, body: "body" })).rejects.toThrow();
    await expect(new Receiver(KEYS).verify({ signature, body: "other" })).rejects.toThrow(/body hash/);
    await expect(new Receiver(KEYS).verify({ signature, body: "body", url: "https://example.com/else" })).rejects.toThrow(/subject/);
    const old = await upstashSignature(KEYS.currentSigningKey, URL_, "body", Date.now() - 3_600_000);
    await expect(new Receiver(KEYS).verify({ signature: old, body: "body" })).rejects.toThrow();
  });

  it("covers an empty body, and gives each signature its own jti", async () => {
    const a = await upstashSignature(KEYS.currentSigningKey, URL_, undefined, Date.now());
    const b = await upstashSignature(KEYS.currentSigningKey, URL_, undefined, Date.now());
    expect(await new Receiver(KEYS).verify({ signature: a, body: "" })).toBe(true);
    const claims = (jwt: string) => JSON.parse(Buffer.from(jwt.split(".")[1]!, "base64url").toString());
    expect(claims(a)).toMatchObject({ iss: "Upstash", sub: URL_, body: EMPTY_SHA256 });
    expect(claims(a).jti).not.toBe(claims(b).jti);
  });
});

describe("delivery", () => {
  const claim = { jobId: "job_0mx7kjv1gg3bw0fu5gt", runId: "run_0mx7kjv1gg3bw0fu5gt_mx7kjv1g", attempt: 3 };

  it("sends QStash's headers: the message id, how often it was retried, the schedule and URL group", () => {
    expect(upstashHeaders({ retries: 3 }, claim)).toEqual({
      "User-Agent": "Upstash-QStash",
      "Upstash-Message-Id": "msg_0mx7kjv1gg3bw0fu5gt",
      "Upstash-Retried": "2",
    });
    const scheduled = upstashHeaders({ retries: 3, scheduleId: "s1", topicName: "t", callerIp: "1.2.3.4" }, claim);
    expect(scheduled).toMatchObject({
      "Upstash-Message-Id": "msg_0mx7kjv1gg3bw0fu5gt_mx7kjv1g",
      "Upstash-Schedule-Id": "s1",
      "Upstash-Topic-Name": "t",
      "Upstash-Caller-Ip": "1.2.3.4",
    });
  });

  const failed = (status: number | null, extra = {}) => ({ runId: claim.runId, fence: 1, ok: false, status, error: "x", ...extra });

  it("retries any failure, 4xx included, after the retry delay or Retry-After, whichever is longer", () => {
    expect(qstashOutcome(failed(404), { retries: 3, retryDelay: "100 * retried" }, 2, false)).toMatchObject({
      kind: "retryable",
      retryAfterMs: 200,
    });
    expect(qstashOutcome(failed(503, { retryAfterMs: 5_000 }), { retries: 3, retryDelay: "100" }, 1, false).retryAfterMs).toBe(5_000);
    expect(qstashOutcome(failed(null), { retries: 3 }, 1, false).retryAfterMs).toBe(Math.round(Math.exp(2.5) * 1000));
  });

  it("ends the message at once on 489 with Upstash-NonRetryable-Error, and only then", () => {
    expect(qstashOutcome(failed(489), { retries: 3 }, 1, true).kind).toBe("permanent");
    expect(qstashOutcome(failed(489), { retries: 3 }, 1, false).kind).toBe("retryable");
    expect(qstashOutcome(failed(500), { retries: 3 }, 1, true).kind).toBe("retryable");
  });
});
