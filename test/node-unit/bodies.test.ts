import { describe, expect, it } from "vitest";
import { DRAIN_GRACE_MS, DRAINED_BODY_BYTES, discardBody, readAtMost, readPrefix } from "../../src/consumer/bodies";

/** A response whose body is `chunks`, then the end (unless `end` is false), with what was pulled and whether it was cancelled. */
function responseOf(chunks: Uint8Array[], { end = true, failAfter = false } = {}) {
  const seen = { pulled: 0, cancelled: false };
  let i = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (i < chunks.length) {
        seen.pulled++;
        controller.enqueue(chunks[i++]!);
      } else if (failAfter) controller.error(new Error("connection reset"));
      else if (end) controller.close();
      // Otherwise the body never ends: a stream the peer keeps open.
    },
    cancel() {
      seen.cancelled = true;
    },
  });
  return { response: new Response(body), seen };
}

const bytes = (n: number) => new Uint8Array(n).fill(120);

describe("discardBody: a success's body, read to its end only when short and prompt", () => {
  it("reads a short body to its end, so its connection can serve the next attempt", async () => {
    const { response, seen } = responseOf([bytes(10), bytes(10)]);
    await discardBody(response);
    expect(seen).toEqual({ pulled: 2, cancelled: false });
  });

  it("cancels a body once it is longer than the limit, unread beyond it", async () => {
    const chunk = DRAINED_BODY_BYTES / 2;
    const { response, seen } = responseOf([bytes(chunk), bytes(chunk), bytes(chunk), bytes(chunk)]);
    await discardBody(response);
    expect(seen.cancelled).toBe(true);
    expect(seen.pulled).toBeLessThan(4);
  });

  it("cancels a body still coming after the grace, and returns", async () => {
    const { response, seen } = responseOf([bytes(5)], { end: false });
    const started = Date.now();
    await discardBody(response);
    expect(seen.cancelled).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(DRAIN_GRACE_MS - 5);
  });

  it("does not throw when the body fails: the answer already stands", async () => {
    const { response } = responseOf([bytes(5)], { failAfter: true });
    await expect(discardBody(response)).resolves.toBeUndefined();
  });

  it("does nothing for a response without a body", async () => {
    await expect(discardBody(new Response(null, { status: 204 }))).resolves.toBeUndefined();
  });
});

describe("readAtMost: a step's result, capped", () => {
  it("returns the whole body when it fits", async () => {
    const { response } = responseOf([new TextEncoder().encode('{"a":'), new TextEncoder().encode("1}")]);
    expect(await readAtMost(response, 100)).toBe('{"a":1}');
  });

  it("returns null and cancels the rest when it does not", async () => {
    const { response, seen } = responseOf([bytes(60), bytes(60), bytes(60)]);
    expect(await readAtMost(response, 100)).toBeNull();
    expect(seen.cancelled).toBe(true);
  });
});

describe("readPrefix: a failure's body, its start only", () => {
  it("returns a short body whole", async () => {
    const { response, seen } = responseOf([new TextEncoder().encode("bad "), new TextEncoder().encode("gateway")]);
    expect(await readPrefix(response, 100)).toBe("bad gateway");
    expect(seen.cancelled).toBe(false);
  });

  it("stops at the limit and cancels the rest unread, even of a body that never ends", async () => {
    const { response, seen } = responseOf([bytes(60), bytes(60), bytes(60)], { end: false });
    expect(await readPrefix(response, 100)).toBe("x".repeat(100));
    expect(seen).toEqual({ pulled: 2, cancelled: true });
  });

  it("leaves out a character the limit cuts in two", async () => {
    // "é" is two bytes: the limit falls between them.
    const { response } = responseOf([new TextEncoder().encode("aé")]);
    expect(await readPrefix(response, 2)).toBe("a");
  });
});
