import { describe, expect, it } from "vitest";
import { parseDestination } from "../../src/qstash/destination";
import { parseQstashDuration } from "../../src/qstash/duration";
import { QstashInputError } from "../../src/qstash/errors";
import { DEFAULT_RETRIES, parseMessageHeaders } from "../../src/qstash/headers";
import { checkRetryDelay, MAX_RETRY_DELAY_MS, retryDelayMs } from "../../src/qstash/retry-delay";

const NOW = Date.parse("2026-12-01T00:00:00Z");
const parse = (headers: Record<string, string>) => parseMessageHeaders(new Headers(headers), NOW);

function refusal(fn: () => unknown): QstashInputError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(QstashInputError);
    return err as QstashInputError;
  }
  throw new Error("expected a refusal");
}

describe("Upstash-* headers", () => {
  it("defaults as QStash does: POST, now, 3 retries, nothing forwarded", () => {
    const o = parse({});
    expect(o).toMatchObject({
      method: "POST",
      notBeforeMs: NOW,
      delayMs: 0,
      retries: DEFAULT_RETRIES,
      contentBasedDeduplication: false,
      headers: {},
    });
  });

  it("reads each header the SDK sends", () => {
    const o = parse({
      "Upstash-Method": "put",
      "Upstash-Delay": "1h30m",
      "Upstash-Retries": "5",
      "Upstash-Retry-Delay": "1000 * pow(2, retried)",
      "Upstash-Timeout": "20s",
      "Upstash-Callback": "https://example.com/cb",
      "Upstash-Callback-Retries": "1",
      "Upstash-Callback-Forward-X-Cb": "yes",
      "Upstash-Failure-Callback": "https://example.com/fail",
      "Upstash-Deduplication-Id": "abc",
      "Upstash-Content-Based-Deduplication": "true",
      "Upstash-Forward-X-Custom": "v",
      "Upstash-Label": "a,b",
      "Upstash-Flow-Control-Key": "k",
      "Upstash-Flow-Control-Value": "parallelism=2, rate=10, period=1m",
      "Upstash-Telemetry-Sdk": "ignored",
      "Content-Type": "text/plain",
    });
    expect(o.method).toBe("PUT");
    expect(o.delayMs).toBe(90 * 60_000);
    expect(o.notBeforeMs).toBe(NOW + 90 * 60_000);
    expect(o.retries).toBe(5);
    expect(o.retryDelay).toBe("1000 * pow(2, retried)");
    expect(o.timeoutMs).toBe(20_000);
    expect(o.callback).toEqual({ url: "https://example.com/cb", retries: 1, headers: { "x-cb": "yes" } });
    expect(o.failureCallback).toEqual({ url: "https://example.com/fail" });
    expect(o.deduplicationId).toBe("abc");
    expect(o.contentBasedDeduplication).toBe(true);
    expect(o.headers).toEqual({ "x-custom": "v", "Content-Type": "text/plain" });
    expect(o.label).toBe("a,b");
    expect(o.flowControl).toEqual({ key: "k", parallelism: 2, rate: 10, periodMs: 60_000 });
  });

  it("takes a delay or a time up to a year ahead, QStash's longest", () => {
    expect(parse({ "Upstash-Delay": "365d" }).delayMs).toBe(365 * 86_400_000);
    expect(parse({ "Upstash-Not-Before": String(NOW / 1000 + 365 * 86_400) }).notBeforeMs).toBe(NOW + 365 * 86_400_000);
  });

  it("takes Upstash-Not-Before (unix seconds) over Upstash-Delay", () => {
    expect(parse({ "Upstash-Not-Before": "1796083200", "Upstash-Delay": "10s" }).notBeforeMs).toBe(1_796_083_200_000);
  });

  it.each([
    [{ "Upstash-Delay": "soon" }, "Upstash-Delay"],
    [{ "Upstash-Delay": "400d" }, "Upstash-Delay"],
    [{ "Upstash-Method": "TRACE" }, "Upstash-Method"],
    [{ "Upstash-Retries": "-1" }, "Upstash-Retries"],
    [{ "Upstash-Retries": "20" }, "Upstash-Retries"],
    [{ "Upstash-Timeout": "0s" }, "Upstash-Timeout"],
    [{ "Upstash-Not-Before": "tomorrow" }, "Upstash-Not-Before"],
    // A year and a day ahead: past QStash's longest delay (what was refused only after 2099).
    [{ "Upstash-Not-Before": String(NOW / 1000 + 366 * 86_400) }, "Upstash-Not-Before"],
    [{ "Upstash-Callback": "https://example.com/cb", "Upstash-Callback-Delay": "400d" }, "Upstash-Callback-Delay"],
    [{ "Upstash-Callback": "ftp://example.com" }, "Upstash-Callback"],
    [{ "Upstash-Failure-Callback": "https://example.com", "Upstash-Failure-Callback-Retries": "x" }, "Upstash-Failure-Callback-Retries"],
    [{ "Upstash-Retry-Delay": "retried +" }, "Upstash-Retry-Delay"],
    [{ "Upstash-Retry-Delay": "evil(1)" }, "Upstash-Retry-Delay"],
    [{ "Upstash-Flow-Control-Key": "k", "Upstash-Flow-Control-Value": "parallelism=0" }, "Upstash-Flow-Control-Value"],
    [{ "Upstash-Flow-Control-Key": "k", "Upstash-Flow-Control-Value": "period=1m" }, "Upstash-Flow-Control-Value"],
    [{ "Upstash-Flow-Control-Key": "k", "Upstash-Flow-Control-Value": "speed=3" }, "Upstash-Flow-Control-Value"],
    [{ "Upstash-Flow-Control-Value": "rate=1" }, "Upstash-Flow-Control-Key"],
    [{ "Upstash-Schedule-Id": "has space" }, "Upstash-Schedule-Id"],
  ])("refuses %j naming %s", (headers, name) => {
    const err = refusal(() => parse(headers));
    expect(err.field).toBe(name);
    expect(err.status).toBe(400);
    expect(err.message.startsWith(`${name}: `)).toBe(true);
  });
});

describe("durations", () => {
  it.each([
    ["10s", 10_000],
    ["500ms", 500],
    ["1h30m", 5_400_000],
    ["2d", 172_800_000],
    ["30", 30_000],
  ])("%s is %d ms", (text, ms) => expect(parseQstashDuration(text)).toBe(ms));
  it.each(["", "s", "1.5s", "10 s", "1w", "-1s"])("%j is not one", (text) => expect(parseQstashDuration(text)).toBeNull());
});

describe("retry delays", () => {
  it("defaults to QStash's exponential backoff, capped at a day", () => {
    expect(retryDelayMs(1)).toBe(Math.round(Math.exp(2.5) * 1000));
    expect(retryDelayMs(2)).toBe(Math.round(Math.exp(5) * 1000));
    expect(retryDelayMs(10)).toBe(MAX_RETRY_DELAY_MS);
  });
  it("evaluates the message's expression of retried", () => {
    expect(retryDelayMs(3, "1000 * pow(2, retried)")).toBe(8_000);
    expect(retryDelayMs(2, "max(100, retried * 50) + 1")).toBe(101);
    expect(retryDelayMs(4, "(retried - 1) ^ 2 * 10")).toBe(90);
    expect(retryDelayMs(1, "-5")).toBe(0);
    expect(checkRetryDelay("sqrt(retried) * 1000")).toBe("sqrt(retried) * 1000");
  });
});

describe("destinations", () => {
  it("takes a URL as the SDK joins it into the path, with the request's query string", () => {
    expect(parseDestination("https://example.com/hook", "?a=1")).toEqual({ url: "https://example.com/hook?a=1" });
    expect(parseDestination("http://127.0.0.1:8080/x", "")).toEqual({ url: "http://127.0.0.1:8080/x" });
  });
  it("repairs a scheme whose slashes were merged, and decodes an encoded URL", () => {
    expect(parseDestination("https:/example.com/hook", "")).toEqual({ url: "https://example.com/hook" });
    expect(parseDestination(encodeURIComponent("https://example.com/a?b=1"), "")).toEqual({ url: "https://example.com/a?b=1" });
  });
  it("takes a name as a URL group's", () => expect(parseDestination("my-group", "")).toEqual({ topic: "my-group" }));
  it.each(["not a url!", "ftp://example.com", "https://"])("refuses %j naming the destination", (rest) => {
    expect(refusal(() => parseDestination(rest, "")).field).toBe("destination");
  });
});
