import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { api } from "./helpers";

/** The API reference's security headers (the dashboard's are dashboard/_headers, checked in the browser test). */
describe("GET /docs", () => {
  it("sends a Content-Security-Policy whose nonce only its own inline script carries, and refuses framing and referrers", async () => {
    const res = await SELF.fetch("https://edgecron.test/docs");
    expect(res.status).toBe(200);
    const csp = res.headers.get("Content-Security-Policy") ?? "";
    const nonce = /script-src 'self' 'nonce-([^']+)'/.exec(csp)?.[1];
    expect(nonce, csp).toMatch(/^[A-Za-z0-9+/=]{16,}$/);
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).toContain("object-src 'none'");
    expect(res.headers.get("X-Frame-Options")).toBe("DENY");
    expect(res.headers.get("Referrer-Policy")).toBe("no-referrer");
    expect(res.headers.get("X-Content-Type-Options")).toBe("nosniff");
    const html = await res.text();
    const inline = [...html.matchAll(/<script(?![^>]*\bsrc=)[^>]*>/g)].map((m) => m[0]);
    expect(inline.length).toBeGreaterThan(0);
    for (const tag of inline) expect(tag).toContain(`nonce="${nonce}"`);
    // A fresh nonce per response: one seen once cannot be replayed into an injected script.
    const again = (await SELF.fetch("https://edgecron.test/docs")).headers.get("Content-Security-Policy");
    expect(again).not.toBe(csp);
  });

  it("the API's JSON answers carry no page policy to break clients", async () => {
    const res = await SELF.fetch("https://edgecron.test/healthz");
    expect(res.headers.get("Content-Security-Policy")).toBeNull();
  });
});

/** Every answer is read as the type it says: a browser never sniffs a JSON body, an error or /metrics into HTML. */
describe("X-Content-Type-Options", () => {
  it.each([
    ["a JSON answer", "/v1/jobs", true],
    ["an error answer (no credential)", "/v1/jobs", false],
    ["an unknown route's error", "/v1/no-such-route", true],
    ["a /v2 error", "/v2/messages/msg_none", true],
    ["/metrics", "/metrics", true],
    ["/openapi.json", "/openapi.json", false],
  ])("is nosniff on %s", async (_, path, withToken) => {
    const res = withToken ? await api(path) : await SELF.fetch(`https://edgecron.test${path}`);
    await res.arrayBuffer();
    expect(res.headers.get("X-Content-Type-Options"), `${path} ${res.status}`).toBe("nosniff");
  });
});
