import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { config, Misconfigured, parseConfig } from "../../src/config";

const good = { SHARD_COUNT: "16" };

/** The queue bindings a Worker has, for `parseConfig` to check DISPATCH_QUEUES against. */
const bound =
  (...queues: string[]) =>
  (binding: string) =>
    queues.includes(binding);
const parse = (vars: Record<string, string | undefined>) => parseConfig(vars, bound("RUNS", "RUNS_1", "RUNS_2"));

function refusal(vars: Record<string, string | undefined>, isQueue = bound("RUNS", "RUNS_1")): string {
  try {
    parseConfig(vars, isQueue);
  } catch (err) {
    expect(err).toBeInstanceOf(Misconfigured);
    return (err as Error).message;
  }
  throw new Error("parsed");
}

describe("config", () => {
  it("parses the settings, with the defaults of those left out or empty", () => {
    for (const vars of [good, { ...good, CLAIM_TIMEOUT_MS: "", PUBLIC_URL: "", ALLOW_PRIVATE_TARGETS: "", DISPATCH_QUEUES: "" }]) {
      expect(parse(vars)).toEqual({
        shardCount: 16,
        claimTimeoutMs: 60_000,
        publicUrl: undefined,
        allowPrivateTargets: false,
        dispatchQueues: ["RUNS"],
      });
    }
    expect(
      parse({
        SHARD_COUNT: "1",
        CLAIM_TIMEOUT_MS: "3000",
        PUBLIC_URL: "https://cron.example.com/",
        ALLOW_PRIVATE_TARGETS: "true",
        DISPATCH_QUEUES: "RUNS_2,RUNS",
      }),
    ).toEqual({
      shardCount: 1,
      claimTimeoutMs: 3_000,
      publicUrl: "https://cron.example.com/",
      allowPrivateTargets: true,
      dispatchQueues: ["RUNS_2", "RUNS"],
    });
    expect(parse({ ...good, PUBLIC_URL: "http://localhost:8787", ALLOW_PRIVATE_TARGETS: "false" })).toMatchObject({
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
    ["DISPATCH_QUEUES", "RUNS,", "separated by commas"],
    ["DISPATCH_QUEUES", "RUNS;RUNS_1", "separated by commas"],
    ["DISPATCH_QUEUES", "edgecron-runs", "separated by commas"],
    ["DISPATCH_QUEUES", "RUNS,RUNS_1,RUNS", "names RUNS more than once"],
    ["DISPATCH_QUEUES", "RUNS,RUNS_9", "RUNS_9 is not a queue bound to this Worker"],
    ["DISPATCH_QUEUES", "RUNS_8,RUNS_9", "RUNS_8, RUNS_9 are not queues bound to this Worker"],
  ] as const)("%s=%j is refused, naming the variable", (name, value, says) => {
    const message = refusal({ ...good, [name]: value });
    expect(message).toMatch(new RegExp(`^${name}: `));
    expect(message).toContain(says);
  });

  it("DISPATCH_QUEUES may be left out or empty where RUNS is bound, and spaces after its commas are allowed", () => {
    expect(parseConfig(good, bound("RUNS")).dispatchQueues).toEqual(["RUNS"]);
    expect(parseConfig({ ...good, DISPATCH_QUEUES: "" }, bound("RUNS")).dispatchQueues).toEqual(["RUNS"]);
    expect(parse({ ...good, DISPATCH_QUEUES: "RUNS, RUNS_1" }).dispatchQueues).toEqual(["RUNS", "RUNS_1"]);
  });

  it("refuses a default DISPATCH_QUEUES where no RUNS queue is bound", () => {
    expect(refusal(good, bound("RUNS_1"))).toMatch(/^DISPATCH_QUEUES: RUNS is not a queue bound to this Worker/);
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
    expect(first).toMatchObject({ shardCount: 4096, allowPrivateTargets: true, dispatchQueues: ["RUNS", "RUNS_1"] });
    expect(Object.isFrozen(first.dispatchQueues)).toBe(true);
  });

  it("checks DISPATCH_QUEUES against the env's bindings, not only its vars", () => {
    const { RUNS_1: _, ...withoutRuns1 } = env;
    expect(() => config(withoutRuns1 as unknown as Env)).toThrow(/^DISPATCH_QUEUES: RUNS_1 is not a queue bound to this Worker/);
    // A binding that is not a queue is not taken for one.
    expect(() => config({ ...env, RUNS_1: env.DB } as unknown as Env)).toThrow(/RUNS_1 is not a queue/);
    expect(config(env).dispatchQueues).toEqual(["RUNS", "RUNS_1"]);
  });
});
