import { describe, expect, it } from "vitest";
import { REDACTED, redact, redactUrl } from "../../src/security/redact";

describe("what the audit log keeps", () => {
  it("drops sealed fields, header values and fields named like secrets; keeps the rest", () => {
    const spec = {
      schedule: { cron: "0 9 * * *" },
      target: { url: "https://api.example.com/hook", method: "POST", headerNames: ["Authorization"], secrets: { iv: "x", data: "y" } },
      headers: { Authorization: "Bearer s3cret", "X-Other": "also" },
      apiKey: "ek_abc",
      nested: [{ password: "p", name: "n" }],
    };
    const kept = redact(spec) as Record<string, unknown>;
    const text = JSON.stringify(kept);
    for (const secret of ["s3cret", "also", "ek_abc", '"p"', '"y"']) expect(text).not.toContain(secret);
    expect(kept).toMatchObject({
      schedule: { cron: "0 9 * * *" },
      target: { url: `https://api.example.com/${REDACTED}`, method: "POST", headerNames: ["Authorization"], secrets: "[sealed]" },
      headers: { Authorization: REDACTED, "X-Other": REDACTED },
      apiKey: REDACTED,
      nested: [{ password: REDACTED, name: "n" }],
    });
  });

  it("keeps a URL's origin only, never its path, query or user info: each shows as a marker that it was there", () => {
    expect(redactUrl("https://u:pw@example.com/a/b?token=t1&x=2")).toBe(`https://${REDACTED}@example.com/${REDACTED}?${REDACTED}`);
    expect(redactUrl("https://example.com/a")).toBe(`https://example.com/${REDACTED}`);
    expect(redactUrl("https://example.com:8443/")).toBe("https://example.com:8443/");
    expect(redactUrl("https://example.com")).toBe("https://example.com/");
    expect(redactUrl("not a url")).toBe(REDACTED);
    expect(JSON.stringify(redact({ notify: { url: "https://h.example/x?sig=abc" } }))).not.toContain("abc");
    // Paths that are the credential: a webhook's, a bot's (in the first segment), a capability URL's.
    for (const [url, secret] of [
      ["https://hooks.slack.com/services/T000/B000/XXXXSECRET", "XXXXSECRET"],
      ["https://api.telegram.org/bot123456:AAHsecret/sendMessage", "AAHsecret"],
      ["https://discord.com/api/webhooks/1/tokenSECRET", "tokenSECRET"],
    ] as const) {
      const shown = redactUrl(url);
      expect(shown, url).not.toContain(secret);
      expect(shown).toBe(`${new URL(url).origin}/${REDACTED}`);
      expect(JSON.stringify(redact({ target: { url } }))).not.toContain(secret);
    }
  });
});
