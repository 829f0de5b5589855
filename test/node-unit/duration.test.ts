import { describe, expect, it } from "vitest";
import { parseDuration } from "../../src/schedule/duration";

describe("parseDuration", () => {
  it.each([
    ["1s", 1_000],
    ["30s", 30_000],
    ["5m", 300_000],
    ["2h", 7_200_000],
    ["1d", 86_400_000],
  ])("%s is %i ms", (text, ms) => expect(parseDuration(text)).toBe(ms));

  it.each(["", "0s", "1", "s", "1.5s", "-1s", "1w", "1 s", "01s", "1S"])("rejects %j", (text) => {
    expect(parseDuration(text)).toBeNull();
  });
});
