import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { Misconfigured } from "../../src/config";
import type { StoredTarget } from "../../src/model/job";
import { headerNamesOf, openTarget, sealTarget, viewTarget } from "../../src/security/targets";

const target = { url: "https://example.com/hook", method: "POST" as const, headers: { Authorization: "Bearer s3cret" }, body: { a: 1 } };

describe("targets at rest", () => {
  it("seal keeps URL, method and header names readable, and nothing else", async () => {
    const stored = await sealTarget(env.ENCRYPTION_KEYS, target, "job_a");
    expect(stored).toMatchObject({ url: target.url, method: "POST", headerNames: ["Authorization"] });
    expect(JSON.stringify(stored)).not.toContain("s3cret");
    expect(await openTarget(env.ENCRYPTION_KEYS, stored, "job_a")).toEqual({ headers: target.headers, body: target.body });
  });

  it("a sealed target does not open under another job's id", async () => {
    const stored = await sealTarget(env.ENCRYPTION_KEYS, target, "job_a");
    await expect(openTarget(env.ENCRYPTION_KEYS, stored, "job_b")).rejects.toThrow(/cannot decrypt/);
  });

  it("the view shows header names and the body, never header values; an unopenable body is left out", async () => {
    const stored = await sealTarget(env.ENCRYPTION_KEYS, target, "job_a");
    expect(await viewTarget(env.ENCRYPTION_KEYS, stored, "job_a")).toEqual({
      url: target.url,
      method: "POST",
      headerNames: ["Authorization"],
      body: { a: 1 },
    });
    expect(await viewTarget(env.ENCRYPTION_KEYS, stored, "job_other")).toEqual({
      url: target.url,
      method: "POST",
      headerNames: ["Authorization"],
    });
  });

  it("missing or malformed ENCRYPTION_KEYS is the operator's problem, said without key material", async () => {
    await expect(sealTarget(undefined, target, "job_a")).rejects.toThrow(Misconfigured);
    const bad = "k1:c2VjcmV0LWJ1dC10b28tc2hvcnQ=";
    await expect(sealTarget(bad, target, "job_a")).rejects.toThrow(/32 bytes/);
    await expect(sealTarget(bad, target, "job_a")).rejects.not.toThrow(/c2VjcmV0/);
  });

  it("a target without headers or body seals to nothing", async () => {
    expect((await sealTarget(env.ENCRYPTION_KEYS, { url: target.url, method: "GET" }, "job_a")).secrets).toBeNull();
  });

  it("a job saved before sealing (headers and body in clear) still runs and shows names only", async () => {
    const legacy = target as unknown as StoredTarget;
    expect(await openTarget(env.ENCRYPTION_KEYS, legacy, "job_a")).toEqual({ headers: target.headers, body: target.body });
    expect((await viewTarget(env.ENCRYPTION_KEYS, legacy, "job_a")).headerNames).toEqual(["Authorization"]);
    expect(headerNamesOf(legacy)).toEqual(["Authorization"]);
  });
});
