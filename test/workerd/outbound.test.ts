/**
 * What leaves edgecron toward a target, end to end in workerd against the loopback receiver:
 * - every request is signed for its tenant (current and next secret) with Edgecron-Signature-V2,
 *   and the first scheme beside it while the tenant keeps it; rotation moves on;
 * - a target's headers and body are sealed at rest, in D1 and in the shard, and never shown;
 * - redirects are followed by hand, each hop through the SSRF guard and unsigned, the job's own
 *   headers kept to the origin the user named;
 * - addresses that are never allowed (metadata, unspecified) are refused at creation even
 *   with ALLOW_PRIVATE_TARGETS on, as this project has it.
 *
 * Only loopback addresses ever receive traffic here: 0.0.0.0 reaches the local host if the
 * guard were broken, and metadata addresses are tested at creation only, never executed.
 */
import { createExecutionContext, env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../src/index";
import type { Job } from "../../src/model/job";
import type { Run } from "../../src/model/run";
import { openTarget, sealTarget } from "../../src/security/targets";
import type { Shard } from "../../src/shard/shard";
import { REQUEST_SIGNATURE_HEADER, type VerifyRequestInput, verifyRequest, verifySignature } from "../../src/verify";
import type { Hit } from "../support/hit";
import { api, createJob, createTenant, FAR_CRON, getRun, hitsOf, listRuns, receiverPath, shardOf, TOKEN, waitForRun } from "./helpers";

type Caller = typeof api;
interface SigningKeys {
  tenantId: string;
  header: string;
  legacyHeader: string | null;
  legacySignature: boolean;
  current: string;
  next: string;
}

const RECEIVER = new URL(env.RECEIVER_URL);
const RECEIVER_PORT = RECEIVER.port;
const FINAL: Run["state"][] = ["succeeded", "failed", "dead", "cancelled"];

async function signingKeys(as: Caller = api): Promise<SigningKeys> {
  const res = await as("/v1/signing-keys");
  expect(res.status, await res.clone().text()).toBe(200);
  return res.json();
}

/** Runs the job once now (POST /trigger) and returns the run id. */
async function trigger(job: Job, as: Caller = api): Promise<string> {
  const res = await as(`/v1/jobs/${job.id}/trigger`, { method: "POST" });
  expect(res.status, await res.clone().text()).toBe(202);
  return ((await res.json()) as Run).id;
}

/** The one hit a target URL got from a run (the receiver records before it answers). */
async function hitOfRun(url: string, runId: string): Promise<Hit> {
  const hits = (await hitsOf(url)).filter((h) => h.headers["x-edgecron-run-id"] === runId);
  expect(hits, `hits of ${url} for ${runId}`).toHaveLength(1);
  return hits[0]!;
}

function verifyHit(hit: Hit, secrets: string[], extra: { body?: string; nowMs?: number } = {}) {
  return verifySignature({
    header: hit.headers["edgecron-signature"],
    runId: hit.headers["x-edgecron-run-id"],
    body: extra.body ?? hit.body,
    secrets,
    ...(extra.nowMs !== undefined && { nowMs: extra.nowMs }),
  });
}

/** A hit's Edgecron-Signature-V2, checked as a target would: against the request it received. */
function verifyHitV2(hit: Hit, secrets: string[], extra: Partial<VerifyRequestInput> = {}) {
  return verifyRequest({ method: hit.method, url: hit.url, headers: hit.headers, body: hit.body, secrets, ...extra });
}

/** Turns the first scheme on or off for a tenant; answers its signing keys. */
async function setLegacy(as: Caller, legacySignature: boolean): Promise<SigningKeys> {
  const res = await as("/v1/signing-keys", { method: "PATCH", json: { legacySignature } });
  expect(res.status, await res.clone().text()).toBe(200);
  return res.json();
}

/** The same receiver path on another origin of the same server: localhost instead of 127.0.0.1. */
function onLocalhost(url: string): string {
  const u = new URL(url);
  u.hostname = "localhost";
  return u.href;
}

const redirectTo = (status: number, location: string) => `status=${status}&location=${encodeURIComponent(location)}`;

// ---------------------------------------------------------------------------------------------

describe("signatures", () => {
  it("a new tenant's requests carry V2 only, over the method, the URL, the body and the headers, with each secret", async () => {
    const tenant = await createTenant();
    const other = await createTenant();
    const keys = await signingKeys(tenant.api);
    const otherKeys = await signingKeys(other.api);
    expect(keys).toMatchObject({ tenantId: tenant.id, header: REQUEST_SIGNATURE_HEADER, legacyHeader: null, legacySignature: false });
    const url = receiverPath("sig-v2", "x=1&y=%C3%BC");
    const job = await createJob({ schedule: FAR_CRON, target: { url, method: "PUT", body: { v: 2 } } }, tenant.api);
    const runId = await trigger(job, tenant.api);
    await waitForRun(runId, ["succeeded"]);
    const hit = await hitOfRun(url, runId);
    expect(hit.headers["edgecron-signature"]).toBeUndefined();
    expect(hit.headers["edgecron-signature-v2"]!.split(", ")).toHaveLength(2);

    for (const secrets of [[keys.current], [keys.next], [keys.current, keys.next]]) {
      expect(await verifyHitV2(hit, secrets), `secrets ${secrets.length}`).toMatchObject({
        ok: true,
        scheme: "v2",
        claims: { method: "PUT", sub: url, run_id: runId, attempt: 1, idempotency_key: runId },
      });
    }
    expect(await verifyHitV2(hit, [otherKeys.current, otherKeys.next])).toEqual({ ok: false, reason: "no_matching_signature" });
    // Sent on to another of the tenant's endpoints, or as another method, it does not verify.
    expect(await verifyHitV2(hit, [keys.current], { url: receiverPath("sig-v2-other", "x=1&y=%C3%BC") })).toEqual({
      ok: false,
      reason: "url_mismatch",
    });
    expect(await verifyHitV2(hit, [keys.current], { method: "DELETE" })).toEqual({ ok: false, reason: "method_mismatch" });
    expect(await verifyHitV2(hit, [keys.current], { body: "{}" })).toEqual({ ok: false, reason: "body_mismatch" });
    // A target that remembers jti refuses the same request twice.
    const seenIds = new Set<string>();
    const seen = (jti: string) => {
      const before = seenIds.has(jti);
      seenIds.add(jti);
      return before;
    };
    expect(await verifyHitV2(hit, [keys.current], { seen })).toMatchObject({ ok: true });
    expect(await verifyHitV2(hit, [keys.current], { seen })).toEqual({ ok: false, reason: "replayed" });
  });

  it("a tenant from before V2 keeps the first scheme beside it until it turns it off (audited)", async () => {
    const tenant = await createTenant();
    expect(await setLegacy(tenant.api, true)).toMatchObject({ legacySignature: true, legacyHeader: "Edgecron-Signature" });
    const url = receiverPath("sig-legacy");
    const job = await createJob({ schedule: FAR_CRON, target: { url, body: { legacy: true } } }, tenant.api);
    const keys = await signingKeys(tenant.api);
    const withLegacy = await hitOfRun(url, await trigger(job, tenant.api).then(async (id) => (await waitForRun(id, ["succeeded"])).id));
    expect(await verifyHit(withLegacy, [keys.current])).toMatchObject({ ok: true });
    expect(await verifyHitV2(withLegacy, [keys.current])).toMatchObject({ ok: true, scheme: "v2" });

    expect(await setLegacy(tenant.api, false)).toMatchObject({ legacySignature: false, legacyHeader: null });
    const withoutLegacy = await hitOfRun(url, await trigger(job, tenant.api).then(async (id) => (await waitForRun(id, ["succeeded"])).id));
    expect(withoutLegacy.headers["edgecron-signature"]).toBeUndefined();
    expect(await verifyHitV2(withoutLegacy, [keys.current])).toMatchObject({ ok: true, scheme: "v2" });
    // With the first scheme too, a request stripped of V2 is a downgrade, refused.
    const { "edgecron-signature-v2": _v2, ...stripped } = withLegacy.headers;
    expect(await verifyHitV2({ ...withLegacy, headers: stripped }, [keys.current], { acceptLegacy: true })).toEqual({
      ok: false,
      reason: "legacy_only",
    });

    const audit = await api(`/v1/audit?tenantId=${tenant.id}&action=signing.schemes`);
    const entries = ((await audit.json()) as { items: Array<{ change: { before: unknown; after: unknown } }> }).items;
    expect(entries.map((e) => e.change.after)).toEqual([{ schemes: ["v2"] }, { schemes: ["v2", "v1"] }]);
  });

  it("a binary body (bodyBase64) is sent as its bytes and signed over them, with V2 alone", async () => {
    const bytes = Uint8Array.from([0, 255, 1, 128, 0xc3, 0x28, 10, 13, 0]);
    const bodyBase64 = btoa(String.fromCharCode(...bytes));
    const url = receiverPath("binary");
    // The default tenant keeps the first scheme, which signs text only.
    const job = await createJob({ schedule: FAR_CRON, target: { url, bodyBase64 } });
    expect(job.target).toMatchObject({ bodyBase64 });
    const runId = await trigger(job);
    await waitForRun(runId, ["succeeded"]);
    const hit = await hitOfRun(url, runId);
    expect(hit.bodyBase64).toBe(bodyBase64);
    expect(hit.headers["content-type"]).toBe("application/octet-stream");
    expect(hit.headers["edgecron-signature"]).toBeUndefined();
    const keys = await signingKeys();
    const received = { method: hit.method, url: hit.url, headers: hit.headers, secrets: [keys.current] };
    expect(await verifyRequest({ ...received, body: bytes })).toMatchObject({ ok: true, scheme: "v2" });
    // Its bytes, not their decoding as text (U+FFFD in place of each invalid byte).
    expect(await verifyRequest({ ...received, body: hit.body })).toEqual({ ok: false, reason: "body_mismatch" });
  });

  it.each([
    [{ bodyBase64: "not base64!" }, "bodyBase64", "base64"],
    [{ bodyBase64: "AAEC", body: "text" }, "bodyBase64", "not both"],
    [{ bodyBase64: "AAEC", method: "GET" }, "bodyBase64", "a GET request has no body"],
  ])("refuses a binary body given wrongly (%j): 400 naming %s, nothing created", async (target, field, reason) => {
    const name = `bad-binary-${crypto.randomUUID()}`;
    const res = await api("/v1/jobs", {
      method: "POST",
      json: { name, schedule: FAR_CRON, target: { url: receiverPath("never"), ...target } },
    });
    expect(res.status).toBe(400);
    const text = await res.text();
    expect(text).toContain(`target.${field}`);
    expect(text).toContain(reason);
    const listed = (await (await api("/v1/jobs?limit=200")).json()) as { items: Job[] };
    expect(listed.items.map((j) => j.name)).not.toContain(name);
  });

  it("refuses a setting that is not a boolean, and changes nothing", async () => {
    const tenant = await createTenant();
    const res = await tenant.api("/v1/signing-keys", { method: "PATCH", json: { legacySignature: "no" } });
    expect(res.status).toBe(400);
    expect(JSON.stringify(await res.json())).toContain("legacySignature");
    expect(await signingKeys(tenant.api)).toMatchObject({ legacySignature: false });
  });

  it("the first scheme signs JSON and string bodies with the tenant's current and next secret, and nothing else verifies", async () => {
    const tenant = await createTenant();
    const other = await createTenant();
    await setLegacy(tenant.api, true);
    const keys = await signingKeys(tenant.api);
    const otherKeys = await signingKeys(other.api);
    expect(keys.current).toMatch(/^whsec_/);
    expect(keys.next).toMatch(/^whsec_/);
    expect(keys.next).not.toBe(keys.current);
    expect(otherKeys.current).not.toBe(keys.current);
    expect(otherKeys.next).not.toBe(keys.next);

    const bodies: Array<string | Record<string, unknown>> = [
      { report: "daily", n: 1, nested: { ü: "✓ 鍵" }, list: [1, null, true] },
      "plain text payload\nwith a second line and ünïcødé",
    ];
    for (const body of bodies) {
      const url = receiverPath("sig");
      const job = await createJob({ schedule: FAR_CRON, target: { url, body } }, tenant.api);
      const runId = await trigger(job, tenant.api);
      expect(await waitForRun(runId, FINAL)).toMatchObject({ state: "succeeded", attempts: 1 });
      const hit = await hitOfRun(url, runId);

      expect(hit.headers["edgecron-signature"]).toMatch(/^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
      if (typeof body === "string") expect(hit.body).toBe(body);
      else {
        expect(JSON.parse(hit.body)).toEqual(body);
        expect(hit.headers["content-type"]).toBe("application/json");
      }

      // Either of the tenant's secrets verifies, alone or together.
      for (const secrets of [[keys.current], [keys.next], [keys.current, keys.next]]) {
        expect(await verifyHit(hit, secrets), `secrets ${secrets.length}`).toMatchObject({ ok: true });
      }
      // Another tenant's do not.
      for (const secrets of [[otherKeys.current], [otherKeys.next], [otherKeys.current, otherKeys.next]]) {
        expect(await verifyHit(hit, secrets)).toEqual({ ok: false, reason: "no_matching_signature" });
      }
      // The body and the run id are covered.
      expect(await verifyHit(hit, [keys.current, keys.next], { body: `${hit.body} ` })).toEqual({
        ok: false,
        reason: "no_matching_signature",
      });
      expect(await verifyHit(hit, [keys.current], { body: "" })).toEqual({ ok: false, reason: "no_matching_signature" });
      expect(
        await verifySignature({ header: hit.headers["edgecron-signature"], runId: `${runId}x`, body: hit.body, secrets: [keys.current] }),
      ).toEqual({ ok: false, reason: "no_matching_signature" });

      // The replay window: ten minutes later (or earlier) the same request is refused.
      expect(await verifyHit(hit, [keys.current], { nowMs: hit.receivedAt + 10 * 60_000 })).toEqual({
        ok: false,
        reason: "timestamp_outside_window",
      });
      expect(await verifyHit(hit, [keys.current], { nowMs: hit.receivedAt - 10 * 60_000 })).toEqual({
        ok: false,
        reason: "timestamp_outside_window",
      });
      expect(await verifyHit(hit, [keys.current], { nowMs: hit.receivedAt + 60_000 })).toMatchObject({ ok: true });
    }
  });

  it("rotation: the old next becomes current, a new next appears, the old current no longer verifies", async () => {
    const tenant = await createTenant();
    const other = await createTenant();
    await setLegacy(tenant.api, true);
    const before = await signingKeys(tenant.api);
    const otherBefore = await signingKeys(other.api);
    const url = receiverPath("rotate");
    const job = await createJob({ schedule: FAR_CRON, target: { url, body: { step: "rotate" } } }, tenant.api);

    const firstRun = await trigger(job, tenant.api);
    await waitForRun(firstRun, ["succeeded"]);
    const first = await hitOfRun(url, firstRun);
    expect(await verifyHit(first, [before.current])).toMatchObject({ ok: true });

    const res = await tenant.api("/v1/signing-keys/rotate", { method: "POST" });
    expect(res.status, await res.clone().text()).toBe(200);
    const after = (await res.json()) as SigningKeys;
    expect(after.tenantId).toBe(tenant.id);
    expect(after.current).toBe(before.next);
    expect(after.next).not.toBe(before.next);
    expect(after.next).not.toBe(before.current);
    expect(await signingKeys(tenant.api)).toEqual(after);
    // Another tenant's secrets do not move.
    expect(await signingKeys(other.api)).toEqual(otherBefore);

    const secondRun = await trigger(job, tenant.api);
    await waitForRun(secondRun, ["succeeded"]);
    const second = await hitOfRun(url, secondRun);
    expect(await verifyHit(second, [after.current])).toMatchObject({ ok: true });
    expect(await verifyHit(second, [after.next])).toMatchObject({ ok: true });
    expect(await verifyHit(second, [before.next])).toMatchObject({ ok: true });
    // Revoked: the old current alone no longer verifies a new request.
    expect(await verifyHit(second, [before.current])).toEqual({ ok: false, reason: "no_matching_signature" });
    // The request before the rotation still verifies with what it was signed with.
    expect(await verifyHit(first, [before.current, before.next])).toMatchObject({ ok: true });
  });
});

// ---------------------------------------------------------------------------------------------

const SECRET_TOKEN = "sk-very-secret-123";
const SECRET_PASSWORD = "hunter2-secret";

/**
 * Every base64 (standard or URL-safe) rendering of `secret` wherever it sits in a longer
 * plaintext: base64 depends on the offset mod 3, so take the stable middle of each of the
 * three alignments.
 */
function base64Forms(secret: string): string[] {
  const forms: string[] = [];
  for (let pad = 0; pad < 3; pad++) {
    const b64 = btoa("x".repeat(pad) + secret);
    const middle = b64.slice(pad === 0 ? 0 : 4, -4);
    forms.push(middle, middle.replace(/\+/g, "-").replace(/\//g, "_"));
  }
  return [...new Set(forms)].filter((f) => f.length >= 8);
}

function expectNoSecret(text: string, secrets: string[], where: string): void {
  for (const secret of secrets) {
    expect(text, `${where} shows ${secret}`).not.toContain(secret);
    for (const form of base64Forms(secret)) expect(text, `${where} holds ${secret} in base64 (${form})`).not.toContain(form);
  }
}

async function catalogSpec(id: string): Promise<string> {
  const row = await env.DB.prepare("SELECT spec FROM jobs WHERE id = ?").bind(id).first<{ spec: string }>();
  expect(row, `D1 row of ${id}`).not.toBeNull();
  return row!.spec;
}

async function shardSpec(job: Job): Promise<string> {
  const row = await runInDurableObject(shardOf(job), (_s: Shard, state) =>
    state.storage.sql.exec("SELECT spec FROM jobs WHERE id = ?", job.id).one(),
  );
  return row.spec as string;
}

describe("target secrets at rest", () => {
  it("seals headers and body in D1 and in the shard, shows header names only, and sends both in clear", async () => {
    const tenant = await createTenant();
    const url = receiverPath("sealed");
    const body = { password: SECRET_PASSWORD, note: "kept" };
    const createRes = await tenant.api("/v1/jobs", {
      method: "POST",
      json: { schedule: FAR_CRON, target: { url, headers: { Authorization: `Bearer ${SECRET_TOKEN}` }, body } },
    });
    const createText = await createRes.text();
    expect(createRes.status, createText).toBe(201);
    const job = JSON.parse(createText) as Job;

    // At rest: sealed in both copies, the URL with them; its origin and the header names readable.
    for (const [where, text] of [
      ["D1", await catalogSpec(job.id)],
      ["shard", await shardSpec(job)],
    ] as const) {
      expectNoSecret(text, [SECRET_TOKEN, SECRET_PASSWORD], `${where} jobs.spec`);
      const spec = JSON.parse(text) as {
        target: { url?: string; origin: string; headerNames: string[]; secrets: { kid: string; iv: string; data: string } };
      };
      expect(spec.target.url, where).toBeUndefined();
      expect(spec.target.origin, where).toBe(new URL(url).origin);
      expect(text, where).not.toContain(new URL(url).pathname);
      expect(spec.target.headerNames, where).toEqual(["Authorization"]);
      expect(spec.target.secrets, where).toMatchObject({ kid: "t1", iv: expect.any(String), data: expect.any(String) });
      expect(text, where).not.toContain("hunter2");
      expect(text, where).not.toContain("Bearer");
    }

    // Every response: header names, never values; the body is shown back.
    const responses: Array<[string, Response]> = [["POST /v1/jobs", new Response(createText, { status: 201 })]];
    responses.push(["GET /v1/jobs/:id", await tenant.api(`/v1/jobs/${job.id}`)]);
    responses.push(["GET /v1/jobs", await tenant.api("/v1/jobs?limit=200")]);
    responses.push(["PATCH /v1/jobs/:id", await tenant.api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { name: "renamed" } })]);
    responses.push(["POST pause", await tenant.api(`/v1/jobs/${job.id}/pause`, { method: "POST" })]);
    responses.push(["POST resume", await tenant.api(`/v1/jobs/${job.id}/resume`, { method: "POST" })]);
    for (const [what, res] of responses) {
      const text = await res.text();
      expect(res.status, `${what}: ${text}`).toBeLessThan(300);
      expectNoSecret(text, [SECRET_TOKEN], what);
      expect(text, what).not.toContain("Bearer");
      const parsed = JSON.parse(text) as Job | { items: Job[] };
      const shown = "items" in parsed ? parsed.items.find((j) => j.id === job.id) : parsed;
      expect(shown, what).toBeDefined();
      expect(shown!.target, what).toEqual({ url, method: "POST", headerNames: ["Authorization"], body });
      expect(Object.keys(shown!.target!), what).not.toContain("headers");
    }

    // Executing: the target gets both in clear.
    const runId = await trigger(job, tenant.api);
    await waitForRun(runId, ["succeeded"]);
    const hit = await hitOfRun(url, runId);
    expect(hit.headers.authorization).toBe(`Bearer ${SECRET_TOKEN}`);
    expect(JSON.parse(hit.body)).toEqual(body);
    // The run's record holds none of it.
    const runText = await (await tenant.api(`/v1/runs/${runId}`)).text();
    expectNoSecret(runText, [SECRET_TOKEN, SECRET_PASSWORD], "GET /v1/runs/:id");

    // A new target through PATCH is sealed again, under a fresh IV, and sent from then on.
    const oldSealed = JSON.parse(await catalogSpec(job.id)).target.secrets as { iv: string; data: string };
    const rotatedToken = "sk-rotated-456-secret";
    const patchRes = await tenant.api(`/v1/jobs/${job.id}`, {
      method: "PATCH",
      json: { target: { url, headers: { Authorization: `Bearer ${rotatedToken}`, "X-Extra": "extra-secret-value" }, body } },
    });
    const patchText = await patchRes.text();
    expect(patchRes.status, patchText).toBe(200);
    expectNoSecret(patchText, [rotatedToken, "extra-secret-value"], "PATCH target");
    expect((JSON.parse(patchText) as Job).target!.headerNames).toEqual(["Authorization", "X-Extra"]);
    for (const [where, text] of [
      ["D1", await catalogSpec(job.id)],
      ["shard", await shardSpec(job)],
    ] as const) {
      expectNoSecret(text, [rotatedToken, "extra-secret-value", SECRET_PASSWORD], `${where} after PATCH`);
      const sealed = JSON.parse(text).target.secrets as { iv: string; data: string };
      expect(sealed.iv, where).not.toBe(oldSealed.iv);
      expect(sealed.data, where).not.toBe(oldSealed.data);
    }
    const secondRun = await trigger(job, tenant.api);
    await waitForRun(secondRun, ["succeeded"]);
    const second = await hitOfRun(url, secondRun);
    expect(second.headers.authorization).toBe(`Bearer ${rotatedToken}`);
    expect(second.headers["x-extra"]).toBe("extra-secret-value");
  });

  it("a sealed target opens only under the job id it was sealed for", async () => {
    const job = await createJob({
      schedule: FAR_CRON,
      target: { url: receiverPath("bound"), headers: { Authorization: `Bearer ${SECRET_TOKEN}` }, body: { password: SECRET_PASSWORD } },
    });
    const other = await createJob({ schedule: FAR_CRON, target: { url: receiverPath("bound-other") } });
    const stored = JSON.parse(await catalogSpec(job.id)).target;
    expect(await openTarget(env.ENCRYPTION_KEYS, stored, job.id)).toEqual({
      url: expect.stringContaining("/hit/bound-"),
      headers: { Authorization: `Bearer ${SECRET_TOKEN}` },
      body: { password: SECRET_PASSWORD },
    });
    // Copied onto another job (another tenant's, say), it does not open, and says nothing of it.
    const copied = openTarget(env.ENCRYPTION_KEYS, stored, other.id);
    await expect(copied).rejects.toThrow("cannot decrypt: ciphertext or context does not match");
    const message = await copied.catch((e: Error) => e.message);
    expectNoSecret(String(message), [SECRET_TOKEN, SECRET_PASSWORD], "the error");

    // The same at unit level, from a fresh seal.
    const sealed = await sealTarget(env.ENCRYPTION_KEYS, { url: "https://example.com/", method: "POST", headers: { A: "b" } }, "job_a");
    await expect(openTarget(env.ENCRYPTION_KEYS, sealed, "job_b")).rejects.toThrow(/cannot decrypt/);
    expect(await openTarget(env.ENCRYPTION_KEYS, sealed, "job_a")).toEqual({ url: "https://example.com/", headers: { A: "b" } });
  });
});

// ---------------------------------------------------------------------------------------------

describe("redirects at execution", () => {
  /**
   * Locations the guard refuses at every hop, whatever ALLOW_PRIVATE_TARGETS says. Each would
   * reach this machine's receiver if the guard let it through (0.0.0.0 and :: connect to the
   * local host), so a broken guard shows up as a hit rather than as traffic elsewhere.
   */
  const REFUSED_LOCATIONS: Array<[string, (never: URL) => string, string]> = [
    ["0.0.0.0", (u) => `http://0.0.0.0:${u.port}${u.pathname}`, "unspecified address 0.0.0.0 is never allowed"],
    ["0 (short form)", (u) => `http://0:${u.port}${u.pathname}`, "unspecified address 0.0.0.0 is never allowed"],
    ["[::]", (u) => `http://[::]:${u.port}${u.pathname}`, "unspecified address :: is never allowed"],
    ["[::ffff:0.0.0.0]", (u) => `http://[::ffff:0.0.0.0]:${u.port}${u.pathname}`, "is never allowed"],
    ["credentials", (u) => `http://user:pass@${u.host}${u.pathname}`, "credentials in the URL are not allowed"],
    ["ftp: with a token in its query", (u) => `ftp://${u.host}${u.pathname}?token=s3cret`, "only http and https targets are allowed"],
  ];

  it.each(REFUSED_LOCATIONS)(
    "a redirect to %s is refused even with private targets allowed: failed, not retried, never sent",
    async (_, make, fragment) => {
      const never = receiverPath("never");
      const location = make(new URL(never));
      const url = receiverPath("redir", redirectTo(302, location));
      const job = await createJob({ schedule: FAR_CRON, target: { url }, retry: { maxAttempts: 3 } });
      const runId = await trigger(job);
      const run = await waitForRun(runId, FINAL);
      expect(run, run.error ?? "").toMatchObject({ state: "failed", attempts: 1, status: null });
      // The Location as the run shows it: its origin; its user info (a password), path and query (a token) marked, never shown.
      const u = new URL(location);
      const shown = `${u.protocol}//${u.username ? "[redacted]@" : ""}${u.host}/[redacted]${u.search ? "?[redacted]" : ""}`;
      expect(run.error).toContain(`redirect to ${shown} refused`);
      expect(run.error).not.toMatch(/pass@|s3cret/);
      expect(run.error).toContain(fragment);
      expect(await hitsOf(url)).toHaveLength(1);
      expect(await hitsOf(never)).toHaveLength(0);
    },
  );

  it("a same-origin 302 is followed with the job's headers, method and body (PUT stays PUT)", async () => {
    const dest = receiverPath("same-dest");
    const url = receiverPath("same", redirectTo(302, dest));
    const body = { kept: true };
    const job = await createJob({
      schedule: FAR_CRON,
      target: { url, method: "PUT", headers: { Authorization: "Bearer same-origin", "X-Custom": "c" }, body },
    });
    const runId = await trigger(job);
    expect(await waitForRun(runId, FINAL)).toMatchObject({ state: "succeeded", status: 200, attempts: 1 });
    const first = await hitOfRun(url, runId);
    const second = await hitOfRun(dest, runId);
    for (const hit of [first, second]) {
      expect(hit.method).toBe("PUT");
      expect(hit.headers).toMatchObject({ authorization: "Bearer same-origin", "x-custom": "c", "content-type": "application/json" });
      expect(JSON.parse(hit.body)).toEqual(body);
    }
    // Signed once, for the URL the job names; the hop the target chose carries no signature.
    expect(await verifyHitV2(first, [(await signingKeys()).current])).toMatchObject({ ok: true, claims: { sub: url } });
    expect(await verifyHit(first, [(await signingKeys()).current])).toMatchObject({ ok: true });
    for (const name of ["edgecron-signature", "edgecron-signature-v2", "upstash-signature"]) {
      expect(second.headers[name], name).toBeUndefined();
    }
  });

  it("a relative Location resolves against the hop's URL", async () => {
    const dest = receiverPath("relative-dest");
    const url = receiverPath("relative", redirectTo(307, new URL(dest).pathname));
    const job = await createJob({ schedule: FAR_CRON, target: { url, body: "raw", headers: { Authorization: "Bearer rel" } } });
    const runId = await trigger(job);
    expect(await waitForRun(runId, FINAL)).toMatchObject({ state: "succeeded" });
    const hit = await hitOfRun(dest, runId);
    expect(hit).toMatchObject({ method: "POST", body: "raw" });
    expect(hit.headers.authorization).toBe("Bearer rel");
  });

  it("307 keeps POST and its body; 302 and 303 turn POST into GET without a body", async () => {
    for (const [status, method, keepsBody] of [
      [307, "POST", true],
      [308, "POST", true],
      [302, "GET", false],
      [303, "GET", false],
    ] as const) {
      const dest = receiverPath(`m${status}-dest`);
      const url = receiverPath(`m${status}`, redirectTo(status, dest));
      const job = await createJob({ schedule: FAR_CRON, target: { url, headers: { Authorization: "Bearer m" }, body: { s: status } } });
      const runId = await trigger(job);
      expect(await waitForRun(runId, FINAL), `${status}`).toMatchObject({ state: "succeeded", status: 200 });
      const first = await hitOfRun(url, runId);
      expect(first.method, `${status}`).toBe("POST");
      const second = await hitOfRun(dest, runId);
      expect(second.method, `${status}`).toBe(method);
      expect(second.headers.authorization, `${status} is same-origin`).toBe("Bearer m");
      expect(second.headers["x-edgecron-run-id"]).toBe(runId);
      if (keepsBody) {
        expect(JSON.parse(second.body)).toEqual({ s: status });
        expect(second.headers["content-type"]).toBe("application/json");
      } else {
        expect(second.body, `${status}`).toBe("");
        expect(second.headers["content-type"], `${status}`).toBeUndefined();
        expect(second.headers["content-length"] ?? "0", `${status}`).toBe("0");
      }
    }
  });

  // A signature names one URL. Signed again at a hop, it would be edgecron's signature for a URL
  // the target chose: a redirect to the tenant's other endpoint on that origin would carry one
  // that verifies there.
  it.each([301, 302, 303, 307, 308])(
    "a same-origin %i hop carries no signature of either scheme, and none verifies there",
    async (status) => {
      const dest = receiverPath(`unsigned-${status}-dest`);
      const url = receiverPath(`unsigned-${status}`, redirectTo(status, dest));
      const job = await createJob({ schedule: FAR_CRON, target: { url, body: { sent: status } } });
      const runId = await trigger(job);
      expect(await waitForRun(runId, FINAL)).toMatchObject({ state: "succeeded", status: 200 });
      const keys = await signingKeys();
      const first = await hitOfRun(url, runId);
      expect(await verifyHitV2(first, [keys.current])).toMatchObject({ ok: true, claims: { sub: url } });
      const second = await hitOfRun(dest, runId);
      for (const name of ["edgecron-signature", "edgecron-signature-v2", "upstash-signature"]) {
        expect(second.headers[name], name).toBeUndefined();
      }
      expect(await verifyHitV2(second, [keys.current, keys.next])).toEqual({ ok: false, reason: "missing_header" });
      // The first hop's own token does not verify at the second either: it names the first URL.
      expect(
        await verifyHitV2({ ...second, headers: { ...second.headers, "edgecron-signature-v2": first.headers["edgecron-signature-v2"]! } }, [
          keys.current,
        ]),
      ).toMatchObject({ ok: false });
    },
  );

  it("a cross-origin redirect drops the job's own headers, the completion token and every signature, keeps edgecron's others", async () => {
    const dest = onLocalhost(receiverPath("cross-dest"));
    expect(new URL(dest).origin).not.toBe(RECEIVER.origin);
    // A 302 turns the POST into a GET without its body, so the redirect is followed.
    const url = receiverPath("cross", redirectTo(302, dest));
    const job = await createJob({
      schedule: FAR_CRON,
      target: { url, headers: { Authorization: "Bearer cross-secret", "X-Api-Key": "k-cross", "X-Team": "data" }, body: { cross: 1 } },
    });
    const runId = await trigger(job);
    const run = await waitForRun(runId, FINAL);
    expect(run, run.error ?? "").toMatchObject({ state: "succeeded", status: 200 });

    const first = await hitOfRun(url, runId);
    expect(first.headers).toMatchObject({ authorization: "Bearer cross-secret", "x-api-key": "k-cross", "x-team": "data" });
    // The default tenant is from before V2: its requests carry both schemes.
    expect(first.headers["edgecron-signature"]).toBeDefined();
    expect(first.headers["edgecron-signature-v2"]).toBeDefined();
    const second = await hitOfRun(dest, runId);
    expect(second).toMatchObject({ method: "GET", body: "" });
    expect(second.headers.host).toBe(`localhost:${RECEIVER_PORT}`);
    expect(second.headers.authorization).toBeUndefined();
    expect(second.headers["x-api-key"]).toBeUndefined();
    expect(second.headers["x-team"]).toBeUndefined();
    expect(JSON.stringify(second.headers)).not.toContain("cross-secret");
    expect(second.headers).toMatchObject({
      "idempotency-key": runId,
      "x-edgecron-run-id": runId,
      "x-edgecron-job-id": job.id,
      "x-edgecron-attempt": "1",
      "x-edgecron-scheduled-at": first.headers["x-edgecron-scheduled-at"],
    });
    // The completion token and the signatures are credentials too: they stay with the first origin.
    expect(first.headers["x-edgecron-completion-token"]).toBeDefined();
    for (const name of ["x-edgecron-completion-token", "edgecron-signature", "edgecron-signature-v2", "upstash-signature"]) {
      expect(second.headers[name], name).toBeUndefined();
    }
  });

  it.each([307, 308])("a cross-origin %i, which would carry the body on, is not followed: failed, not retried", async (status) => {
    const dest = onLocalhost(receiverPath(`cross-body-dest-${status}`));
    const url = receiverPath(`cross-body-${status}`, redirectTo(status, dest));
    const job = await createJob({ schedule: FAR_CRON, target: { url, body: { sealed: "at rest" } }, retry: { maxAttempts: 3 } });
    const run = await waitForRun(await trigger(job), FINAL);
    expect(run, run.error ?? "").toMatchObject({ state: "failed", attempts: 1, status: null });
    expect(run.error).toContain(
      `redirect to ${new URL(dest).origin}/[redacted] not followed: the request's body is not sent on to another origin`,
    );
    expect(run.error).not.toContain(new URL(dest).pathname);
    expect(await hitsOf(dest)).toHaveLength(0);
  });

  it("a cross-origin 307 of a GET is followed, unsigned", async () => {
    const dest = onLocalhost(receiverPath("cross-get-dest"));
    const url = receiverPath("cross-get", redirectTo(307, dest));
    const job = await createJob({ schedule: FAR_CRON, target: { url, method: "GET" } });
    const runId = await trigger(job);
    expect(await waitForRun(runId, FINAL)).toMatchObject({ state: "succeeded" });
    const second = await hitOfRun(dest, runId);
    expect(second.headers["edgecron-signature-v2"]).toBeUndefined();
    expect(second.headers["x-edgecron-run-id"]).toBe(runId);
  });

  it("headers and signatures stay dropped after a cross-origin hop, even on a redirect back to the first origin", async () => {
    const back = receiverPath("back-dest");
    const middle = onLocalhost(receiverPath("back-middle", redirectTo(307, back)));
    const url = receiverPath("back", redirectTo(307, middle));
    const job = await createJob({ schedule: FAR_CRON, target: { url, method: "GET", headers: { Authorization: "Bearer back" } } });
    const runId = await trigger(job);
    expect(await waitForRun(runId, FINAL)).toMatchObject({ state: "succeeded" });
    expect((await hitOfRun(url, runId)).headers.authorization).toBe("Bearer back");
    expect((await hitOfRun(middle, runId)).headers.authorization).toBeUndefined();
    const last = await hitOfRun(back, runId);
    expect(last.headers.authorization).toBeUndefined();
    expect(last.headers["edgecron-signature-v2"]).toBeUndefined();
  });

  it("follows exactly 5 redirects", async () => {
    // A chain: url0 → url1 → … → url5, which answers 200.
    let next = receiverPath("chain-end");
    const end = next;
    const hops: string[] = [];
    for (let i = 4; i >= 0; i--) {
      next = receiverPath(`chain${i}`, redirectTo(302, next));
      hops.unshift(next);
    }
    expect(next.length).toBeLessThanOrEqual(2048);
    const job = await createJob({ schedule: FAR_CRON, target: { url: next, method: "GET" } });
    const runId = await trigger(job);
    expect(await waitForRun(runId, FINAL)).toMatchObject({ state: "succeeded", status: 200, attempts: 1 });
    for (const hop of [...hops, end]) expect(await hitsOf(hop)).toHaveLength(1);
  });

  it("more than 5 redirects (a 302 loop to itself) fails permanently", async () => {
    // "#" resolves to the same URL (query included): the receiver redirects to itself forever.
    const url = receiverPath("loop", redirectTo(302, "#"));
    const job = await createJob({ schedule: FAR_CRON, target: { url, method: "GET" }, retry: { maxAttempts: 3 } });
    const runId = await trigger(job);
    const run = await waitForRun(runId, FINAL);
    expect(run).toMatchObject({ state: "failed", attempts: 1, status: null });
    expect(run.error).toContain("more than 5 redirects");
    // The first request and 5 redirects followed, then it stops.
    expect(await hitsOf(url)).toHaveLength(6);
  });
});

// ---------------------------------------------------------------------------------------------

describe("the deployment's own host (PUBLIC_URL)", () => {
  const PUBLIC = "https://edgecron.example";

  /** The Worker deployed at PUBLIC, its API called at that host. */
  async function callDeployed(path: string, body: unknown): Promise<Response> {
    const request = new Request(`${PUBLIC}${path}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    return worker.fetch(request, { ...env, PUBLIC_URL: PUBLIC } as Env, createExecutionContext());
  }

  it.each([
    ["a target", { schedule: FAR_CRON, target: { url: `${PUBLIC}/v1/jobs` } }, "target.url"],
    ["a target on another port", { schedule: FAR_CRON, target: { url: "https://EDGECRON.example:8443/v2/publish/x" } }, "target.url"],
    ["a step's target", { schedule: FAR_CRON, steps: [{ id: "a", target: { url: `${PUBLIC}/v1/tenants` } }] }, "steps.0.target.url"],
    ["a notification URL", { schedule: FAR_CRON, target: { url: receiverPath("own") }, notify: { url: `${PUBLIC}/v1/x` } }, "notify.url"],
  ])("%s at it is refused at creation with a 400 naming the field, nothing stored", async (_, body, field) => {
    const count = () => env.DB.prepare("SELECT COUNT(*) AS n FROM jobs").first<number>("n");
    const before = await count();
    const res = await callDeployed("/v1/jobs", body);
    expect(res.status, await res.clone().text()).toBe(400);
    const { error } = (await res.json()) as { error: { code: string; message: string; issues: Array<{ path: string; message: string }> } };
    expect(error.code).toBe("invalid_request");
    expect(error.issues).toContainEqual({ path: field, message: expect.stringContaining("own host: a job may not call edgecron itself") });
    expect(await count()).toBe(before);
  });

  it("a target elsewhere is taken by the same deployment", async () => {
    const res = await callDeployed("/v1/jobs", { schedule: FAR_CRON, target: { url: "https://other.example/v1/jobs" }, breaker: false });
    expect(res.status, await res.clone().text()).toBe(201);
  });
});

describe("always refused at creation, even with ALLOW_PRIVATE_TARGETS on", () => {
  const NEVER: Array<[string, string]> = [
    ["http://169.254.169.254/", "cloud metadata endpoints are never allowed"],
    ["http://169.254.169.254/latest/meta-data/", "cloud metadata endpoints are never allowed"],
    ["http://[fd00:ec2::254]/", "cloud metadata endpoints are never allowed"],
    ["http://metadata.google.internal/", "cloud metadata endpoints are never allowed"],
    ["http://METADATA.google.internal./computeMetadata/v1/", "cloud metadata endpoints are never allowed"],
    ["http://[::ffff:169.254.169.254]/", "cloud metadata endpoints are never allowed"],
    ["http://0.0.0.0/", "unspecified address 0.0.0.0 is never allowed"],
    [`http://0.0.0.0:${RECEIVER_PORT}/hit/x`, "unspecified address 0.0.0.0 is never allowed"],
    ["http://0/", "unspecified address 0.0.0.0 is never allowed"],
    ["http://[::]/", "is never allowed"],
  ];

  async function jobCount(): Promise<number> {
    return (await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs").first<{ n: number }>())!.n;
  }

  async function expectRefused(res: Response, fragment: string, what: string): Promise<void> {
    const text = await res.text();
    expect(res.status, `${what}: ${text}`).toBe(400);
    const { error } = JSON.parse(text) as { error: { code: string; message: string; issues: Array<{ path: string; message: string }> } };
    expect(error.code).toBe("invalid_request");
    expect(error.issues[0]!.path, what).toBe("target.url");
    expect(error.issues[0]!.message, what).toContain(fragment);
  }

  it.each(NEVER)("POST %s → 400 on target.url, nothing stored", async (url, fragment) => {
    const before = await jobCount();
    const res = await api("/v1/jobs", { method: "POST", json: { schedule: FAR_CRON, target: { url } } });
    await expectRefused(res, fragment, url);
    expect(await jobCount()).toBe(before);
  });

  it("PATCH to any of them → 400, the job unchanged", async () => {
    const url = receiverPath("patch-never");
    const job = await createJob({ schedule: FAR_CRON, target: { url } });
    const catalogBefore = await catalogSpec(job.id);
    const shardBefore = await shardSpec(job);
    for (const [bad, fragment] of NEVER) {
      const res = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { target: { url: bad } } });
      await expectRefused(res, fragment, `PATCH ${bad}`);
    }
    const after = (await (await api(`/v1/jobs/${job.id}`)).json()) as Job;
    expect(after.version).toBe(1);
    expect(after.target!.url).toBe(url);
    expect(await catalogSpec(job.id)).toBe(catalogBefore);
    expect(await shardSpec(job)).toBe(shardBefore);
    // And the job still runs where it pointed.
    const runId = await trigger(job);
    await waitForRun(runId, ["succeeded"]);
    expect((await listRuns(job.id)).map((r) => r.jobVersion)).toEqual([1]);
    expect(await getRun(runId)).toMatchObject({ jobVersion: 1 });
  });
});
