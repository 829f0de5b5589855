import { describe, expect, it } from "vitest";
import type { RunView } from "../../src/protocol/shard-rpc";
import type { AttemptRow } from "../../src/protocol/stored-rows";
import { base64, callbackBody, callbackFor } from "../../src/qstash/callback-body";
import { eventsOfRun } from "../../src/qstash/events";

const attempt = (
  n: number,
  outcome: AttemptRow["outcome"],
  startedAt: number,
  finishedAt: number | null,
  error: string | null = null,
): AttemptRow => ({
  attempt: n,
  fence: n,
  startedAt,
  finishedAt,
  outcome,
  status: null,
  error,
  completionToken: "t",
  late: null,
});

function run(state: RunView["state"], attemptLog: AttemptRow[], extra: Partial<RunView> = {}): RunView {
  return {
    id: "run_0mx7kjv1gg3bw0fu5gt_mx7kjv1g",
    jobId: "job_0mx7kjv1gg3bw0fu5gt",
    jobVersion: 1,
    trigger: "schedule",
    scheduledAt: 1_000,
    catchUp: false,
    state,
    attempt: attemptLog.length,
    fence: attemptLog.length,
    dueAt: null,
    leaseUntil: null,
    createdAt: 1_000,
    startedAt: 1_100,
    finishedAt: null,
    status: null,
    error: null,
    result: null,
    permit: null,
    redispatches: 0,
    parentRunId: null,
    attempts: attemptLog.length,
    attemptLog,
    ...extra,
  } as RunView;
}

const message = { messageId: "msg_0mx7kjv1gg3bw0fu5gt", url: "https://example.com/x", label: "a,b" };

describe("a message's events, from its run", () => {
  it("a delivery after a failed attempt: created, active, error, active, delivered, newest first", () => {
    const events = eventsOfRun(
      run("succeeded", [attempt(1, "failed", 1_100, 1_200, "HTTP 500"), attempt(2, "succeeded", 1_300, 1_400)], { finishedAt: 1_400 }),
      message,
    );
    expect(events.map((e) => [e.state, e.time])).toEqual([
      ["DELIVERED", 1_400],
      ["ACTIVE", 1_300],
      ["ERROR", 1_200],
      ["ACTIVE", 1_100],
      ["CREATED", 1_000],
    ]);
    expect(events.find((e) => e.state === "ERROR")?.error).toBe("HTTP 500");
    expect(events[0]).toMatchObject({ messageId: message.messageId, url: message.url, label: "a", labels: ["a", "b"] });
  });

  it("waiting for a retry shows when; ended without success, FAILED", () => {
    const waiting = eventsOfRun(run("retry_wait", [attempt(1, "timed_out", 1_100, 1_200)], { dueAt: 5_000 }), message);
    expect(waiting[0]).toMatchObject({ state: "RETRY", nextDeliveryTime: 5_000 });
    const dead = eventsOfRun(run("dead", [attempt(1, "failed", 1_100, 1_200)], { finishedAt: 1_200, error: "HTTP 503" }), message);
    expect(dead[0]).toMatchObject({ state: "FAILED", error: "HTTP 503" });
  });
});

describe("callbacks", () => {
  it("call the callback on success and the failure callback once no attempt is left, never a callback's own", () => {
    const meta = { retries: 2, callback: { url: "https://e/cb" }, failureCallback: { url: "https://e/f" } };
    expect(callbackFor(meta, true, false)).toBe("callback");
    expect(callbackFor(meta, false, false)).toBeNull();
    expect(callbackFor(meta, false, true)).toBe("failureCallback");
    expect(callbackFor({ ...meta, callbackOf: "msg_x" }, true, false)).toBeNull();
    expect(callbackFor({ retries: 2 }, true, false)).toBeNull();
  });

  it("carry QStash's body: the answer and the source, bodies base64", () => {
    const body = JSON.parse(
      callbackBody(
        { retries: 3, scheduleId: "s", callerIp: "1.2.3.4" },
        {
          messageId: "msg_a",
          url: "https://e/x",
          method: "POST",
          headers: { "X-A": "1" },
          body: "héllo",
          attempt: 2,
          createdAt: 7,
          dlqId: "run_x",
        },
        { status: 500, headers: { "content-type": "text/plain" }, body: "nope" },
      ),
    );
    expect(body).toEqual({
      status: 500,
      header: { "content-type": ["text/plain"] },
      body: base64("nope"),
      retried: 1,
      maxRetries: 3,
      dlqId: "run_x",
      sourceMessageId: "msg_a",
      url: "https://e/x",
      method: "POST",
      sourceHeader: { "X-A": ["1"] },
      sourceBody: Buffer.from("héllo").toString("base64"),
      createdAt: 7,
      scheduleId: "s",
      callerIP: "1.2.3.4",
    });
  });
});
