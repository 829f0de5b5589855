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
      target: { url: "https://api.example.com/hook", method: "POST", headerNames: ["Authorization"], secrets: "[sealed]" },
      headers: { Authorization: REDACTED, "X-Other": REDACTED },
      apiKey: REDACTED,
      nested: [{ password: REDACTED, name: "n" }],
    });
  });

  it("keeps a URL's origin and path, never its query or user info", () => {
    expect(redactUrl("https://u:pw@example.com/a/b?token=t1&x=2")).toBe(`https://${REDACTED}@example.com/a/b?${REDACTED}`);
    expect(redactUrl("https://example.com/a")).toBe("https://example.com/a");
    expect(redactUrl("not a url")).toBe(REDACTED);
    expect(JSON.stringify(redact({ notify: { url: "https://h.example/x?sig=abc" } }))).not.toContain("abc");
  });
});
