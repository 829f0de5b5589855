/**
 * The SSRF guard through the API as deployed: ALLOW_PRIVATE_TARGETS is off in this project, so
 * every spelling of a loopback, private, link-local, unique-local, CGNAT, unspecified or
 * metadata address, every local-only name, every other scheme and every URL with credentials
 * is refused at creation and by PATCH, and nothing is stored. A public name is accepted.
 * No request leaves edgecron here: refused jobs are never stored, the accepted one never fires.
 */
import { env } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Job } from "../../src/model/job";
import { api } from "../workerd/helpers";

/** 00:00 on January 1st: never fires during a test. */
const NEVER_CRON = { cron: "0 0 1 1 *" };

const LOOPBACK = "loopback address 127.0.0.1";
const HINT = "ALLOW_PRIVATE_TARGETS";
const METADATA = "cloud metadata endpoints are never allowed";
const NOT_HTTP = "http or https";
const CREDENTIALS = "credentials in the URL are not allowed";

/** Each URL, with a fragment its refusal must contain. */
const REFUSED: Array<[string, string]> = [
  ["http://127.0.0.1/", LOOPBACK],
  ["http://127.1/", LOOPBACK],
  ["http://2130706433/", LOOPBACK],
  ["http://0177.0.0.1/", LOOPBACK],
  ["http://0x7f000001/", LOOPBACK],
  ["http://127.0.0.1:8787/hook", LOOPBACK],
  ["http://localhost/", "loopback hostname localhost"],
  ["http://LOCALHOST./", "loopback hostname localhost."],
  ["http://foo.localhost/", "loopback hostname foo.localhost"],
  ["http://[::1]/", "loopback address ::1"],
  ["http://[::ffff:127.0.0.1]/", "loopback address 127.0.0.1"],
  ["http://[::ffff:7f00:1]/", "loopback address 127.0.0.1"],
  ["http://10.0.0.1/", "private address 10.0.0.1"],
  ["http://172.16.0.1/", "private address 172.16.0.1"],
  ["http://192.168.1.1/", "private address 192.168.1.1"],
  ["http://169.254.1.1/", "link-local address 169.254.1.1"],
  ["http://169.254.169.254/", METADATA],
  ["http://169.254.169.254/latest/meta-data/iam/security-credentials/", METADATA],
  ["http://[fe80::1]/", "link-local address fe80::1"],
  ["http://[fc00::1]/", "unique-local address fc00::1"],
  ["http://[fd12::1]/", "unique-local address fd12::1"],
  ["http://100.64.0.1/", "carrier-grade NAT address 100.64.0.1"],
  ["http://0.0.0.0/", "unspecified address 0.0.0.0 is never allowed"],
  ["http://[::]/", "unspecified address :: is never allowed"],
  ["http://metadata.google.internal/", METADATA],
  ["http://printer.local/", "local-network hostname printer.local"],
  ["http://intranet/", "single-label hostname intranet"],
  ["ftp://example.com/file", NOT_HTTP],
  ["file:///etc/passwd", NOT_HTTP],
  ["gopher://example.com/", NOT_HTTP],
  ["javascript:alert(1)", NOT_HTTP],
  ["https://user:pass@example.com/", CREDENTIALS],
  ["https://token@example.com/", CREDENTIALS],
];

async function jobCount(): Promise<number> {
  return (await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs").first<{ n: number }>())!.n;
}

async function expectRefused(res: Response, fragment: string, what: string): Promise<void> {
  const text = await res.text();
  expect(res.status, `${what}: ${text}`).toBe(400);
  const { error } = JSON.parse(text) as { error: { code: string; issues: Array<{ path: string; message: string }> } };
  expect(error.code, what).toBe("invalid_request");
  expect(error.issues[0]!.path, `${what}: ${text}`).toBe("target.url");
  expect(error.issues[0]!.message, what).toContain(fragment);
}

describe("SSRF guard with ALLOW_PRIVATE_TARGETS off", () => {
  it("this project really has private targets off", () => {
    expect(env.ALLOW_PRIVATE_TARGETS).toBe("false");
  });

  it.each(REFUSED)("POST %s → 400 on target.url, nothing stored", async (url, fragment) => {
    const before = await jobCount();
    const res = await api("/v1/jobs", { method: "POST", json: { schedule: NEVER_CRON, target: { url } } });
    await expectRefused(res, fragment, url);
    expect(await jobCount()).toBe(before);
  });

  it("private-range refusals name the setting that allows them locally", async () => {
    for (const url of ["http://127.0.0.1/", "http://10.0.0.1/", "http://localhost/", "http://intranet/"]) {
      const res = await api("/v1/jobs", { method: "POST", json: { schedule: NEVER_CRON, target: { url } } });
      expect(await res.text(), url).toContain(HINT);
    }
    // …but not the ones no setting allows.
    for (const url of ["http://169.254.169.254/", "http://0.0.0.0/"]) {
      const res = await api("/v1/jobs", { method: "POST", json: { schedule: NEVER_CRON, target: { url } } });
      expect(await res.text(), url).not.toContain(HINT);
    }
  });

  describe("an existing job with a public target", () => {
    let job: Job;

    beforeAll(async () => {
      const res = await api("/v1/jobs", { method: "POST", json: { schedule: NEVER_CRON, target: { url: "https://example.com/x" } } });
      expect(res.status, await res.clone().text()).toBe(201);
      job = await res.json();
    });

    afterAll(async () => {
      const res = await api(`/v1/jobs/${job.id}`, { method: "DELETE" });
      expect(res.status).toBe(200);
    });

    it("was accepted and is stored, never due during the test", async () => {
      expect(job).toMatchObject({ version: 1, paused: false, target: { url: "https://example.com/x", method: "POST", headerNames: [] } });
      expect(Date.parse(job.nextRunAt!)).toBeGreaterThan(Date.now() + 60_000);
      const row = await env.DB.prepare("SELECT spec FROM jobs WHERE id = ?").bind(job.id).first<{ spec: string }>();
      // Stored sealed: its origin is what stays readable.
      expect(JSON.parse(row!.spec).target).toMatchObject({ origin: "https://example.com", secrets: { kid: "t1" } });
      expect(row!.spec).not.toContain("example.com/x");
    });

    it.each(REFUSED)("PATCH to %s → 400 on target.url, the job unchanged", async (url, fragment) => {
      const before = await jobCount();
      const res = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { target: { url } } });
      await expectRefused(res, fragment, `PATCH ${url}`);
      const after = (await (await api(`/v1/jobs/${job.id}`)).json()) as Job;
      expect(after.version).toBe(1);
      expect(after.target!.url).toBe("https://example.com/x");
      expect(await jobCount()).toBe(before);
    });

    it("a PATCH to another public URL is accepted", async () => {
      const res = await api(`/v1/jobs/${job.id}`, { method: "PATCH", json: { target: { url: "https://example.com/y" } } });
      expect(res.status, await res.clone().text()).toBe(200);
      expect(await res.json()).toMatchObject({ version: 2, target: { url: "https://example.com/y" } });
    });
  });
});
