import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SIGNATURE_HEADER, signatureHeader, signingSecret, signingSecrets } from "../../src/security/signing";
import { type VerifyInput, verifySignature } from "../../src/verify";

const MASTER = `${"m".repeat(16)}0123456789abcdef`; // exactly the 32-character minimum
const NOW = 1_800_000_000_000;
const RUN = "run_0mx34t9ichmazsj5l8v_1a2b3c";
const BODY = '{"hello":"wörld"}';

const verify = (header: string | null | undefined, input: Partial<VerifyInput> & { secrets: string[] }) =>
  verifySignature({ header, runId: RUN, body: BODY, nowMs: NOW, ...input });

describe("signing secrets", () => {
  it("are deterministic, per tenant and generation, and look like whsec_<base64url>", async () => {
    const a = await signingSecret(MASTER, "tenant_a", 0);
    // Targets hold these secrets, so the derivation is fixed for good: HMAC-SHA256 keyed by the
    // master, of "<tenant>:<generation>", in base64url without padding (computed independently).
    expect(a).toBe("whsec_KzouwSNK5E_q1elvbFKN77E2iaHgmT0v8alSLfjlmsk");
    expect(await signingSecret(MASTER, "tenant_a", 3)).toBe("whsec_W74QqfkalDQQ8PCjz3sSqB05s8OQresfyK4eVvztunY");
    expect(a).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    const others = [
      await signingSecret(MASTER, "tenant_b", 0),
      await signingSecret(MASTER, "tenant_a", 1),
      await signingSecret(MASTER.replace("m", "n"), "tenant_a", 0),
    ];
    expect(new Set([a, ...others]).size).toBe(4);
  });

  it("current/next follow the generation: a rotation makes the old next current", async () => {
    const g3 = await signingSecrets(MASTER, "tenant_a", 3);
    expect(g3).toEqual({ current: await signingSecret(MASTER, "tenant_a", 3), next: await signingSecret(MASTER, "tenant_a", 4) });
    expect((await signingSecrets(MASTER, "tenant_a", 4)).current).toBe(g3.next);
    expect(await signingSecrets(MASTER, "tenant_a", 3)).toEqual(g3); // cached path
  });

  it("refuse a missing or short master secret, and a bad generation", async () => {
    for (const master of [undefined, "", "x".repeat(31)]) {
      await expect(signingSecret(master as string, "t", 0)).rejects.toThrow(/SIGNING_SECRET is missing or shorter than 32/);
    }
    await expect(signingSecret(MASTER, "t", -1)).rejects.toThrow(RangeError);
    await expect(signingSecret(MASTER, "t", 1.5)).rejects.toThrow(RangeError);
  });
});

describe("signature header", () => {
  it("has the documented shape: t, then one v1 per secret", async () => {
    expect(SIGNATURE_HEADER).toBe("Edgecron-Signature");
    const header = await signatureHeader(["whsec_a", "whsec_b"], RUN, BODY, NOW + 999);
    expect(header).toMatch(/^t=1800000000,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
  });

  it("matches an independently computed HMAC (pinned format)", async () => {
    const secret = "whsec_test";
    const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`1800000000.${RUN}.${BODY}`)));
    const hex = Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
    expect(await signatureHeader([secret], RUN, BODY, NOW)).toBe(`t=1800000000,v1=${hex}`);
  });

  it("verifies with the current secret, the next alone, and across a rotation", async () => {
    const { current, next } = await signingSecrets(MASTER, "tenant_a", 7);
    const header = await signatureHeader([current, next], RUN, BODY, NOW);
    expect(await verify(header, { secrets: [current] })).toEqual({ ok: true, timestamp: NOW / 1000 });
    expect(await verify(header, { secrets: [next] })).toEqual({ ok: true, timestamp: NOW / 1000 });
    // After a rotation the target holds [g+1, g+2]; requests signed before it still verify.
    const afterNext = await signingSecret(MASTER, "tenant_a", 9);
    expect((await verify(header, { secrets: [next, afterNext] })).ok).toBe(true);
    // An empty body signs as "".
    const empty = await signatureHeader([current, next], RUN, "", NOW);
    expect((await verify(empty, { secrets: [current], body: "" })).ok).toBe(true);
  });

  it("rejects a tampered body, another run id and a revoked secret", async () => {
    const { current, next } = await signingSecrets(MASTER, "tenant_a", 7);
    const header = await signatureHeader([current, next], RUN, BODY, NOW);
    const mismatch = { ok: false, reason: "no_matching_signature" };
    expect(await verify(header, { secrets: [current], body: BODY.replace("ö", "o") })).toEqual(mismatch);
    expect(await verify(header, { secrets: [current], body: `${BODY} ` })).toEqual(mismatch);
    expect(await verify(header, { secrets: [current], runId: `${RUN}x` })).toEqual(mismatch);
    // Two rotations later (g = 9) the secrets are [9, 10]; a request signed with [6, 7]
    // (generation 6 is now g - 3, long revoked) must not verify.
    const old = await signingSecrets(MASTER, "tenant_a", 6);
    const revoked = await signatureHeader([old.current, old.next], RUN, BODY, NOW);
    const now = await signingSecrets(MASTER, "tenant_a", 9);
    expect(await verify(revoked, { secrets: [now.current, now.next] })).toEqual(mismatch);
    // And another tenant's secrets never verify.
    const other = await signingSecrets(MASTER, "tenant_b", 7);
    expect(await verify(header, { secrets: [other.current, other.next] })).toEqual(mismatch);
  });

  it("rejects timestamps outside the window, both ways, and honours its edges", async () => {
    const secret = await signingSecret(MASTER, "tenant_a", 0);
    const header = await signatureHeader([secret], RUN, BODY, NOW);
    const outside = { ok: false, reason: "timestamp_outside_window" };
    expect(await verify(header, { secrets: [secret], nowMs: NOW + 3_600_000 })).toEqual(outside);
    expect(await verify(header, { secrets: [secret], nowMs: NOW - 3_600_000 })).toEqual(outside);
    // Default 300 s: exactly at the limit accepted, one second past rejected, both directions.
    expect((await verify(header, { secrets: [secret], nowMs: NOW + 300_000 })).ok).toBe(true);
    expect(await verify(header, { secrets: [secret], nowMs: NOW + 301_000 })).toEqual(outside);
    expect((await verify(header, { secrets: [secret], nowMs: NOW - 300_000 })).ok).toBe(true);
    expect(await verify(header, { secrets: [secret], nowMs: NOW - 301_000 })).toEqual(outside);
    // A custom tolerance.
    expect((await verify(header, { secrets: [secret], toleranceSeconds: 10, nowMs: NOW + 10_000 })).ok).toBe(true);
    expect(await verify(header, { secrets: [secret], toleranceSeconds: 10, nowMs: NOW + 11_000 })).toEqual(outside);
    expect(await verify(header, { secrets: [secret], toleranceSeconds: 10, nowMs: NOW - 11_000 })).toEqual(outside);
    expect((await verify(header, { secrets: [secret], toleranceSeconds: 0, nowMs: NOW + 999 })).ok).toBe(true);
  });

  it("tells a missing header from a malformed one", async () => {
    const secret = await signingSecret(MASTER, "tenant_a", 0);
    const header = await signatureHeader([secret], RUN, BODY, NOW);
    const v1 = header.split(",")[1]!;
    const missing = { ok: false, reason: "missing_header" };
    const malformed = { ok: false, reason: "malformed_header" };
    expect(await verify(null, { secrets: [secret] })).toEqual(missing);
    expect(await verify(undefined, { secrets: [secret] })).toEqual(missing);
    expect(await verify("", { secrets: [secret] })).toEqual(missing);
    expect(await verify(header, { secrets: [secret], runId: null })).toEqual(missing);
    for (const bad of [
      "garbage",
      v1, // no t
      "t=1800000000", // no v1
      `t=abc,${v1}`,
      `t=,${v1}`,
      `t=-5,${v1}`,
      `t=1.5e9,${v1}`,
      `t=1800000000,t=1800000000,${v1}`,
      "t=1800000000,v1=zz",
      `t=1800000000,${v1.slice(0, -2)}`,
      `t=1800000000,${v1},`,
    ]) {
      expect(await verify(bad, { secrets: [secret] }), bad).toEqual(malformed);
    }
    // Unknown keys are ignored and whitespace around parts is tolerated.
    expect((await verify(`v0=abc, ${header.replace(",", " , ")}, v2=future`, { secrets: [secret] })).ok).toBe(true);
  });

  it("refuses to verify against no secrets (a target misconfiguration)", async () => {
    const header = await signatureHeader(["whsec_x"], RUN, BODY, NOW);
    await expect(verify(header, { secrets: [] })).rejects.toThrow(TypeError);
    await expect(verify(header, { secrets: [""] })).rejects.toThrow(TypeError);
  });

  it("property: any body and run id verifies, and changing one character of the body does not", async () => {
    const { current, next } = await signingSecrets(MASTER, "tenant_p", 0);
    await fc.assert(
      fc.asyncProperty(
        fc.string({ unit: "binary", minLength: 1 }),
        fc.string({ unit: "binary", minLength: 1, maxLength: 64 }),
        fc.nat(),
        fc.string({ unit: "binary", minLength: 1, maxLength: 1 }),
        async (body, runId, index, replacement) => {
          const header = await signatureHeader([current, next], runId, body, NOW);
          const input = { header, runId, body, secrets: [current], nowMs: NOW };
          expect(await verifySignature(input)).toEqual({ ok: true, timestamp: NOW / 1000 });

          // Flip one whole code point (not half a surrogate pair) to a different one.
          const chars = [...body];
          const i = index % chars.length;
          chars[i] = replacement === chars[i] ? (replacement === "a" ? "b" : "a") : replacement;
          const tampered = await verifySignature({ ...input, body: chars.join("") });
          expect(tampered).toEqual({ ok: false, reason: "no_matching_signature" });
        },
      ),
      { numRuns: 200 },
    );
  });
});
