import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { config, Misconfigured, parseConfig } from "../../src/config";

const good = { SHARD_COUNT: "16" };

function refusal(vars: Record<string, string | undefined>): string {
  try {
    parseConfig(vars);
  } catch (err) {
    expect(err).toBeInstanceOf(Misconfigured);
    return (err as Error).message;
  }
  throw new Error("parsed");
}

describe("config", () => {
  it("parses the settings, with the defaults of those left out or empty", () => {
    for (const vars of [good, { ...good, CLAIM_TIMEOUT_MS: "", PUBLIC_URL: "", ALLOW_PRIVATE_TARGETS: "" }]) {
      expect(parseConfig(vars)).toEqual({ shardCount: 16, claimTimeoutMs: 60_000, publicUrl: undefined, allowPrivateTargets: false });
    }
    expect(
      parseConfig({ SHARD_COUNT: "1", CLAIM_TIMEOUT_MS: "3000", PUBLIC_URL: "https://cron.example.com/", ALLOW_PRIVATE_TARGETS: "true" }),
    ).toEqual({ shardCount: 1, claimTimeoutMs: 3_000, publicUrl: "https://cron.example.com/", allowPrivateTargets: true });
    expect(parseConfig({ ...good, PUBLIC_URL: "http://localhost:8787", ALLOW_PRIVATE_TARGETS: "false" })).toMatchObject({
      publicUrl: "http://localhost:8787",
      allowPrivateTargets: false,
    });
  });

  it.each([
    ["SHARD_COUNT", undefined, "is not set"],
    ["SHARD_COUNT", "", "positive integer"],
    ["SHARD_COUNT", "0", "positive integer"],
    ["SHARD_COUNT", "-4", "positive integer"],
    ["SHARD_COUNT", "1.5", "positive integer"],
    ["SHARD_COUNT", "16 shards", "positive integer"],
    ["SHARD_COUNT", "1e3", "positive integer"],
    ["SHARD_COUNT", "99999999999999999999", "positive integer"],
    ["CLAIM_TIMEOUT_MS", "0", "positive integer"],
    ["CLAIM_TIMEOUT_MS", "60s", "positive integer"],
    ["CLAIM_TIMEOUT_MS", " 60000", "positive integer"],
    ["PUBLIC_URL", "cron.example.com", "http or https URL"],
    ["PUBLIC_URL", "ftp://cron.example.com", "http or https URL"],
    ["PUBLIC_URL", "/v1", "http or https URL"],
    ["ALLOW_PRIVATE_TARGETS", "yes", '"true" or "false"'],
    ["ALLOW_PRIVATE_TARGETS", "1", '"true" or "false"'],
    ["ALLOW_PRIVATE_TARGETS", "TRUE", '"true" or "false"'],
  ] as const)("%s=%j is refused, naming the variable", (name, value, says) => {
    const message = refusal({ ...good, [name]: value });
    expect(message).toMatch(new RegExp(`^${name}: `));
    expect(message).toContain(says);
  });

  it("names every bad variable at once", () => {
    const message = refusal({ SHARD_COUNT: "x", PUBLIC_URL: "nope" });
    expect(message).toContain("SHARD_COUNT: ");
    expect(message).toContain("PUBLIC_URL: ");
  });

  it("is parsed once per env object, and frozen", () => {
    const first = config(env);
    expect(config(env)).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    expect(first).toMatchObject({ shardCount: 4096, allowPrivateTargets: true });
  });
});
