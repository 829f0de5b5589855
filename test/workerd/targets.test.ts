import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { Misconfigured } from "../../src/config";
import { originOf, type StoredTarget } from "../../src/model/job";
import { loadKeyRing, seal } from "../../src/security/sealing";
import { headerNamesOf, needsResealing, openTarget, resealTarget, sealTarget, viewTarget } from "../../src/security/targets";

/** A URL that carries its own credential, in its path and its query, as chat webhooks do. */
const target = {
  url: "https://example.com/hooks/T0K3N-in-path?sig=query-t0ken",
  method: "POST" as const,
  headers: { Authorization: "Bearer s3cret" },
  body: { a: 1 },
};

describe("targets at rest", () => {
  it("seal keeps the origin, method and header names readable, and nothing else: not the URL's path or query", async () => {
    const stored = await sealTarget(env.ENCRYPTION_KEYS, target, "job_a");
    expect(stored).toEqual({ origin: "https://example.com", method: "POST", headerNames: ["Authorization"], secrets: expect.any(Object) });
    for (const secret of ["s3cret", "T0K3N", "query-t0ken", "/hooks"]) expect(JSON.stringify(stored)).not.toContain(secret);
    expect(await openTarget(env.ENCRYPTION_KEYS, stored, "job_a")).toEqual({ url: target.url, headers: target.headers, body: target.body });
    expect(originOf(stored)).toBe("https://example.com");
  });

  it("a sealed target does not open under another job's id", async () => {
    const stored = await sealTarget(env.ENCRYPTION_KEYS, target, "job_a");
    await expect(openTarget(env.ENCRYPTION_KEYS, stored, "job_b")).rejects.toThrow(/cannot decrypt/);
  });

  it("the view shows the URL, header names and the body, never header values; an unopenable target shows its origin", async () => {
    const stored = await sealTarget(env.ENCRYPTION_KEYS, target, "job_a");
    expect(await viewTarget(env.ENCRYPTION_KEYS, stored, "job_a", true)).toEqual({
      url: target.url,
      method: "POST",
      headerNames: ["Authorization"],
      body: { a: 1 },
    });
    expect(await viewTarget(env.ENCRYPTION_KEYS, stored, "job_other", true)).toEqual({
      url: "https://example.com",
      method: "POST",
      headerNames: ["Authorization"],
    });
  });

  it("the view of a key without write is the URL's origin, header names and the body's size and SHA-256", async () => {
    const stored = await sealTarget(env.ENCRYPTION_KEYS, target, "job_a");
    const sent = new TextEncoder().encode(JSON.stringify(target.body));
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", sent));
    expect(await viewTarget(env.ENCRYPTION_KEYS, stored, "job_a", false)).toEqual({
      url: "https://example.com",
      method: "POST",
      headerNames: ["Authorization"],
      bodyBytes: sent.byteLength,
      bodySha256: [...digest].map((b) => b.toString(16).padStart(2, "0")).join(""),
      reduced: true,
    });
  });

  it("missing or malformed ENCRYPTION_KEYS is the operator's problem, said without key material", async () => {
    await expect(sealTarget(undefined, target, "job_a")).rejects.toThrow(Misconfigured);
    const bad = "k1:c2VjcmV0LWJ1dC10b28tc2hvcnQ=";
    await expect(sealTarget(bad, target, "job_a")).rejects.toThrow(/32 bytes/);
    await expect(sealTarget(bad, target, "job_a")).rejects.not.toThrow(/c2VjcmV0/);
  });

  it("a target without headers or body still seals its URL", async () => {
    const stored = await sealTarget(env.ENCRYPTION_KEYS, { url: target.url, method: "GET" }, "job_a");
    expect(stored.secrets).not.toBeNull();
    expect(await openTarget(env.ENCRYPTION_KEYS, stored, "job_a")).toEqual({ url: target.url });
  });

  it("a target stored before URLs were sealed opens with its URL in clear, and re-sealing moves the URL in", async () => {
    // What the release before stored: the URL beside the sealed part, which held headers and body only.
    const ring = await loadKeyRing(env.ENCRYPTION_KEYS);
    const secrets = { headers: target.headers, body: target.body };
    const before = { url: target.url, method: target.method, headerNames: ["Authorization"], secrets: await seal(ring, secrets, "job_a") };
    expect(await openTarget(env.ENCRYPTION_KEYS, before, "job_a")).toEqual({ url: target.url, ...secrets });
    expect(originOf(before)).toBe("https://example.com");
    expect(needsResealing(before, "t1")).toBe(true);

    const after = await resealTarget(env.ENCRYPTION_KEYS, before, "job_a");
    expect(after).not.toHaveProperty("url");
    expect(after.origin).toBe("https://example.com");
    expect(JSON.stringify(after)).not.toContain("T0K3N");
    expect(await openTarget(env.ENCRYPTION_KEYS, after, "job_a")).toEqual({ url: target.url, headers: target.headers, body: target.body });
    expect(needsResealing(after, "t1")).toBe(false);
    // One with no secrets at all gets them: its URL.
    const bare = await resealTarget(env.ENCRYPTION_KEYS, { url: target.url, method: "GET", headerNames: [], secrets: null }, "job_a");
    expect(await openTarget(env.ENCRYPTION_KEYS, bare, "job_a")).toEqual({ url: target.url });
  });

  it("a job saved before sealing (headers and body in clear) still runs and shows names only", async () => {
    const legacy = target as unknown as StoredTarget;
    expect(await openTarget(env.ENCRYPTION_KEYS, legacy, "job_a")).toEqual({ url: target.url, headers: target.headers, body: target.body });
    expect((await viewTarget(env.ENCRYPTION_KEYS, legacy, "job_a", true)).headerNames).toEqual(["Authorization"]);
    expect(headerNamesOf(legacy)).toEqual(["Authorization"]);
  });
});
