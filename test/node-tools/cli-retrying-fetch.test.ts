import { describe, expect, it } from "vitest";
import { retryingFetch } from "../../cli/retrying-fetch.ts";

/** Answers `statuses` in turn (the last one from then on), each with `retryAfter`; counts the calls. */
function answering(statuses: number[], retryAfter = "0") {
  const calls: string[] = [];
  const send = async (request: Request) => {
    calls.push(`${request.method} ${new URL(request.url).pathname} ${await request.text()}`);
    const status = statuses[Math.min(calls.length - 1, statuses.length - 1)]!;
    return new Response(JSON.stringify({ status }), { status, headers: { "retry-after": retryAfter } });
  };
  return { send, calls };
}

const url = (path: string) => `http://127.0.0.1:1${path}`;

describe("the CLI's fetch", () => {
  it("sends a read again after a 503's Retry-After, until it is answered", async () => {
    const { send, calls } = answering([503, 503, 200]);
    const response = await retryingFetch(send)(new Request(url("/v1/jobs")));
    expect(response.status).toBe(200);
    expect(calls).toHaveLength(3);
  });

  it("sends a backfill (idempotent) again after a 429, with its body each time", async () => {
    const { send, calls } = answering([429, 202]);
    const body = JSON.stringify({ from: "2026-01-01T00:00:00Z", to: "2026-01-02T00:00:00Z" });
    const response = await retryingFetch(send)(new Request(url("/v1/jobs/job_x/backfill"), { method: "POST", body }));
    expect(response.status).toBe(202);
    expect(calls).toEqual([`POST /v1/jobs/job_x/backfill ${body}`, `POST /v1/jobs/job_x/backfill ${body}`]);
  });

  it("does not send a create again: a second try could make a second job", async () => {
    const { send, calls } = answering([503, 201]);
    const response = await retryingFetch(send)(new Request(url("/v1/jobs"), { method: "POST", body: "{}" }));
    expect(response.status).toBe(503);
    expect(calls).toHaveLength(1);
  });

  it("gives up after four tries, or at once when the wait asked for is too long", async () => {
    const always = answering([503]);
    expect((await retryingFetch(always.send)(new Request(url("/v1/jobs")))).status).toBe(503);
    expect(always.calls).toHaveLength(4);
    const long = answering([503, 200], "60");
    expect((await retryingFetch(long.send)(new Request(url("/v1/jobs")))).status).toBe(503);
    expect(long.calls).toHaveLength(1);
  });
});
