import fc from "fast-check";
import { sign as signJwt, verify as verifyJwt } from "hono/jwt";
import { describe, expect, it } from "vitest";
import { REQUEST_SIGNATURE_HEADER, requestSignature, type SignedRequest } from "../../src/security/request-signature";
import { SIGNATURE_HEADER, signatureHeader } from "../../src/security/signing";
import { type VerifyRequestInput, verifyRequest } from "../../src/verify";

const CURRENT = "whsec_current-secret-of-the-tenant";
const NEXT = "whsec_next-secret-of-the-tenant";
const NOW = 1_800_000_000_000;
const REQUEST: SignedRequest = {
  method: "POST",
  url: "https://hooks.example.com/jobs/report?tenant=acme&x=1",
  body: '{"hello":"wörld"}',
  runId: "run_0mx34t9ichmazsj5l8v_1a2b3c",
  attempt: 2,
  idempotencyKey: "run_0mx34t9ichmazsj5l8v_1a2b3c",
};

/** The request as the target receives it: the signature and the headers it covers. */
async function received(
  secrets = [CURRENT, NEXT],
  request = REQUEST,
  nowMs = NOW,
): Promise<{ method: string; url: string; headers: Headers; body: string }> {
  const headers = new Headers({
    [REQUEST_SIGNATURE_HEADER]: await requestSignature(secrets, request, nowMs),
    "X-Edgecron-Run-Id": request.runId,
    "Idempotency-Key": request.idempotencyKey,
    "X-Edgecron-Attempt": String(request.attempt),
  });
  return { method: request.method, url: request.url, headers, body: (request.body as string | undefined) ?? "" };
}

const check = (input: Omit<VerifyRequestInput, "secrets">, extra: Partial<VerifyRequestInput> = {}) =>
  verifyRequest({ ...input, secrets: [CURRENT], nowMs: NOW, ...extra });

describe("Edgecron-Signature-V2", () => {
  it("is one standard HS256 JWT per secret, with the request's claims (checked by another JWT library)", async () => {
    // Now, not NOW: the other library checks the times against its own clock.
    const issued = Math.floor(Date.now() / 1000);
    const { headers } = await received([CURRENT, NEXT], REQUEST, issued * 1000);
    const tokens = headers.get(REQUEST_SIGNATURE_HEADER)!.split(", ");
    expect(tokens).toHaveLength(2);
    const [byCurrent, byNext] = await Promise.all([verifyJwt(tokens[0]!, CURRENT, "HS256"), verifyJwt(tokens[1]!, NEXT, "HS256")]);
    expect(byCurrent).toEqual({
      iss: "edgecron",
      sub: REQUEST.url,
      method: "POST",
      // SHA-256 of the UTF-8 body, base64url: computed apart with `printf '%s' '{"hello":"wörld"}' | sha256sum`.
      body: "Ff6TbVpcSlZMjckAIoAAkmPAzAvQ8o4WZSUpqfg7LSM",
      run_id: REQUEST.runId,
      attempt: 2,
      idempotency_key: REQUEST.idempotencyKey,
      iat: issued,
      nbf: issued,
      exp: issued + 300,
      jti: expect.stringMatching(/^[A-Za-z0-9_-]{22}$/),
    });
    expect(byNext).toEqual(byCurrent);
    await expect(verifyJwt(tokens[0]!, NEXT, "HS256")).rejects.toThrow();
  });

  it("verifies with the current secret, the next, or both; another tenant's does not", async () => {
    const input = await received();
    for (const secrets of [[CURRENT], [NEXT], [CURRENT, NEXT]]) {
      expect(await check(input, { secrets }), secrets.join()).toMatchObject({ ok: true, scheme: "v2", claims: { run_id: REQUEST.runId } });
    }
    expect(await check(input, { secrets: ["whsec_someone-else"] })).toEqual({ ok: false, reason: "no_matching_signature" });
    // Signed with the current secret alone: a target holding only the next one cannot verify.
    expect(await check(await received([CURRENT]), { secrets: [NEXT] })).toEqual({ ok: false, reason: "no_matching_signature" });
  });

  it("covers the method, the exact URL, the body and the headers a target acts on", async () => {
    const input = await received();
    const changed = (change: Partial<typeof input>) => check({ ...input, ...change });
    expect(await changed({ method: "PUT" })).toEqual({ ok: false, reason: "method_mismatch" });
    expect(await changed({ method: "post" })).toMatchObject({ ok: true });
    expect(await changed({ url: "https://hooks.example.com/jobs/delete?tenant=acme&x=1" })).toEqual({ ok: false, reason: "url_mismatch" });
    expect(await changed({ url: "https://hooks.example.com/jobs/report?tenant=other&x=1" })).toEqual({ ok: false, reason: "url_mismatch" });
    expect(await changed({ url: "https://evil.example.com/jobs/report?tenant=acme&x=1" })).toEqual({ ok: false, reason: "url_mismatch" });
    // The same URL spelled otherwise is the same URL.
    expect(await changed({ url: "HTTPS://HOOKS.example.com:443/jobs/report?tenant=acme&x=1" })).toMatchObject({ ok: true });
    expect(await changed({ body: "" })).toEqual({ ok: false, reason: "body_mismatch" });
    for (const [name, value] of [
      ["Idempotency-Key", "another-key"],
      ["X-Edgecron-Run-Id", "run_other"],
      ["X-Edgecron-Attempt", "3"],
    ]) {
      const headers = new Headers(input.headers);
      headers.set(name!, value!);
      expect(await changed({ headers }), name).toEqual({ ok: false, reason: "header_mismatch" });
    }
  });

  it("any other body fails (property)", async () => {
    const input = await received();
    await fc.assert(
      fc.asyncProperty(
        fc.string({ unit: "binary" }).filter((b) => b !== input.body),
        async (body) => {
          expect(await check({ ...input, body })).toEqual({ ok: false, reason: "body_mismatch" });
        },
      ),
      { numRuns: 200 },
    );
  });

  it("is valid for five minutes from its issue, with the leeway given both ways", async () => {
    const input = await received();
    expect(await check(input, { nowMs: NOW + 300_000 + 30_000 })).toMatchObject({ ok: true });
    expect(await check(input, { nowMs: NOW + 300_000 + 31_000 })).toEqual({ ok: false, reason: "expired" });
    expect(await check(input, { nowMs: NOW + 400_000, leewaySeconds: 0 })).toEqual({ ok: false, reason: "expired" });
    expect(await check(input, { nowMs: NOW - 30_000 })).toMatchObject({ ok: true });
    expect(await check(input, { nowMs: NOW - 31_000 })).toEqual({ ok: false, reason: "not_yet_valid" });
  });

  it("refuses a replay once `seen` has its jti, and each request has its own", async () => {
    const remembered = new Map<string, number>();
    const seen = (jti: string, exp: number) => {
      const before = remembered.has(jti);
      remembered.set(jti, exp);
      return before;
    };
    const first = await received();
    const second = await received();
    expect(await check(first, { seen })).toMatchObject({ ok: true });
    expect(await check(first, { seen })).toEqual({ ok: false, reason: "replayed" });
    expect(await check(second, { seen })).toMatchObject({ ok: true });
    expect([...remembered.values()]).toEqual([NOW / 1000 + 300, NOW / 1000 + 300]);
    // A forged request never reaches `seen`: it cannot fill a target's memory.
    await check({ ...first, body: "forged" }, { seen });
    expect(remembered.size).toBe(2);
  });

  it("refuses what is not an HS256 token of edgecron's claims, `alg: none` included", async () => {
    const input = await received();
    const claims = JSON.parse(Buffer.from(input.headers.get(REQUEST_SIGNATURE_HEADER)!.split(".")[1]!, "base64url").toString());
    const unsigned = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString("base64url")}.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.`;
    const otherIssuer = await signJwt({ ...claims, iss: "Upstash" }, CURRENT, "HS256");
    const hs512 = await signJwt(claims, CURRENT, "HS512");
    for (const token of [unsigned, otherIssuer, hs512, "a.b", "not a token", `${claims}`]) {
      const headers = new Headers(input.headers);
      headers.set(REQUEST_SIGNATURE_HEADER, token);
      expect(await check({ ...input, headers }), token.slice(0, 40)).toEqual({ ok: false, reason: "malformed_header" });
    }
    // The same claims signed by another library with the tenant's secret do verify: it is a plain JWT.
    const headers = new Headers(input.headers);
    headers.set(REQUEST_SIGNATURE_HEADER, await signJwt(claims, CURRENT, "HS256"));
    expect(await check({ ...input, headers })).toMatchObject({ ok: true });
  });

  it("takes Node's lower-cased header object as well as Headers", async () => {
    const input = await received();
    const nodeHeaders = Object.fromEntries([...input.headers].map(([k, v]) => [k, v]));
    expect(await check({ ...input, headers: nodeHeaders })).toMatchObject({ ok: true });
  });

  it("never takes the first scheme alone: a request stripped of its V2 token is refused, even sent on to another URL", async () => {
    const input = await received();
    const both = new Headers(input.headers);
    both.set(SIGNATURE_HEADER, await signatureHeader([CURRENT], REQUEST.runId, input.body, NOW));
    // Every request edgecron signs carries V2; one that comes with the first scheme alone had its V2 token removed.
    const stripped = new Headers(both);
    stripped.delete(REQUEST_SIGNATURE_HEADER);
    const elsewhere = { ...input, url: "https://hooks.example.com/admin/delete-everything", method: "DELETE" };
    for (const options of [{}, { acceptLegacy: true }] as Array<Partial<VerifyRequestInput>>) {
      expect(await check({ ...input, headers: stripped }, options), JSON.stringify(options)).toEqual({ ok: false, reason: "legacy_only" });
      expect(await check({ ...elsewhere, headers: stripped }, options)).toEqual({ ok: false, reason: "legacy_only" });
    }
    // No signature at all is still missing_header; both present, V2 decides.
    expect(await check({ ...input, headers: new Headers({ "X-Edgecron-Run-Id": REQUEST.runId }) })).toEqual({
      ok: false,
      reason: "missing_header",
    });
    expect(await check({ ...input, headers: both })).toMatchObject({ ok: true, scheme: "v2" });
    expect(await check({ ...elsewhere, headers: both })).toEqual({ ok: false, reason: "url_mismatch" });
  });

  it("throws for a caller's mistake rather than refusing every request", async () => {
    const input = await received();
    await expect(check(input, { secrets: [] })).rejects.toThrow(TypeError);
    await expect(check({ ...input, url: "/jobs/report" })).rejects.toThrow(/absolute URL/);
  });
});
