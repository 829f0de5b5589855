import type { Job } from "edgecron/client";
import { describe, expect, it } from "vitest";
import { SERVER_DEFAULTS } from "../../cli/apply/defaults.ts";
import { type DeclaredJob, declaredJobs } from "../../cli/apply/file.ts";
import { AmbiguousName, planApply } from "../../cli/apply/plan.ts";
import { shownReduced } from "../../cli/apply/scope.ts";
import { UsageError } from "../../cli/exit.ts";
import { APP_MODULE, type AppModule } from "../../tools/client-schema/render.ts";

/** `edgecron apply`'s plan: pure, from the declared jobs and the API's jobs. */

/** A job as the API answers for `declared` created with no optional field: defaults filled in. */
function apiJob(id: string, name: string | null, overrides: Partial<Job> = {}): Job {
  return {
    id,
    tenantId: "ten_a",
    name,
    schedule: { cron: "0 2 * * *", timezone: "Europe/Berlin" },
    description: "At 02:00 AM (Europe/Berlin)",
    target: { url: "http://127.0.0.1:9/x", method: "POST", headerNames: ["Authorization"], body: { a: 1 } },
    retry: structuredClone(SERVER_DEFAULTS.retry) as Job["retry"],
    timeoutMs: 30_000,
    overlap: "allow",
    misfire: "fire_once",
    catchupWindow: "1h",
    paused: false,
    pausedReason: null,
    completed: false,
    version: 1,
    shard: "s1",
    createdAt: "2026-01-01T00:00:00.000Z",
    updatedAt: "2026-01-01T00:00:00.000Z",
    nextRunAt: null,
    ...overrides,
  };
}

const declared = (name: string, overrides: Partial<DeclaredJob> = {}): DeclaredJob => ({
  name,
  schedule: { cron: "0 2 * * *", timezone: "Europe/Berlin" },
  target: { url: "http://127.0.0.1:9/x", headers: { authorization: "Bearer s3cret" }, body: { a: 1 } },
  ...overrides,
});

describe("planApply", () => {
  it("creates what is missing, and leaves alone what matches by meaning", () => {
    const same = declared("same", {
      schedule: { cron: " 0  2 * * * ", timezone: "Europe/Berlin" },
      catchupWindow: "60m",
      retry: { maxAttempts: 3 },
    });
    const plan = planApply([same, declared("new")], [apiJob("job_1", "same")], { prune: false });
    expect(plan.unchanged).toEqual([{ name: "same", id: "job_1" }]);
    expect(plan.changes).toEqual([{ action: "create", name: "new", job: declared("new"), pause: false }]);
  });

  it("notify without `on` means the API's default events; a removed notify or pauseAfterFailures is cleared with null", () => {
    const have = apiJob("job_1", "n", {
      notify: { url: "https://example.com/h", on: ["failed", "dead", "paused", "recovered"] },
      pauseAfterFailures: 3,
    });
    const same = planApply([declared("n", { notify: { url: "https://example.com/h" }, pauseAfterFailures: 3 })], [have], { prune: false });
    expect(same.changes).toEqual([]);
    const removed = planApply([declared("n")], [have], { prune: false });
    expect(removed.changes[0]).toMatchObject({ action: "update", patch: { notify: null, pauseAfterFailures: null } });
  });

  it("breaker: absent and true are the same; taking out a false turns it back on", () => {
    expect(planApply([declared("b", { breaker: true })], [apiJob("job_1", "b")], { prune: false }).changes).toEqual([]);
    const off = apiJob("job_1", "b", { breaker: false });
    expect(planApply([declared("b")], [off], { prune: false }).changes[0]).toMatchObject({ patch: { breaker: true } });
  });

  it("compares instants as instants and a cron's zone as UTC when none is named", () => {
    const job = apiJob("job_1", "w", { schedule: { cron: "0 2 * * *", startAt: "2026-12-01T08:00:00.000Z" } });
    const plan = planApply(
      [declared("w", { schedule: { cron: "0 2 * * *", timezone: "UTC", startAt: "2026-12-01T09:00:00+01:00" } })],
      [job],
      { prune: false },
    );
    expect(plan.changes).toEqual([]);
  });

  it("patches only the fields that differ: a removed default is sent as the default, a removed option as null", () => {
    const have = apiJob("job_1", "j", {
      timeoutMs: 5_000,
      jitter: "30s",
      retry: { ...SERVER_DEFAULTS.retry, maxAttempts: 7 } as Job["retry"],
    });
    const want = declared("j", { schedule: { every: "30m" } });
    const [change] = planApply([want], [have], { prune: false }).changes;
    expect(change).toMatchObject({ action: "update", id: "job_1", pause: null });
    if (change?.action !== "update") throw new Error("not an update");
    expect(change.patch).toEqual({ schedule: { every: "30m" }, retry: SERVER_DEFAULTS.retry, timeoutMs: 30_000, jitter: null });
    expect(change.fields.map((f) => f.field)).toEqual(["schedule", "retry", "timeoutMs", "jitter"]);
    expect(change.fields[0]).toEqual({ field: "schedule", from: have.schedule, to: { every: "30m" } });
  });

  it("compares a flow-control group by what it means, and clears a removed one with null", () => {
    const have = apiJob("job_1", "j", { flowControl: { key: "api", rate: 60, period: "1m" } });
    const same = declared("j", { flowControl: { key: "api", rate: 60, period: "60s" } });
    expect(planApply([same], [have], { prune: false }).changes).toEqual([]);
    const [change] = planApply([declared("j")], [have], { prune: false }).changes;
    if (change?.action !== "update") throw new Error("not an update");
    expect(change.patch).toEqual({ flowControl: null });
  });

  it("sends a changed target whole, and never shows a header's value", () => {
    const want = declared("j", { target: { url: "http://127.0.0.1:9/y", headers: { Authorization: "Bearer n3w" } } });
    const [change] = planApply([want], [apiJob("job_1", "j")], { prune: false }).changes;
    if (change?.action !== "update") throw new Error("not an update");
    expect(change.patch).toEqual({ target: want.target });
    expect(JSON.stringify(change.fields)).not.toContain("n3w");
    expect(change.fields).toEqual([
      {
        field: "target",
        from: { url: "http://127.0.0.1:9/x", method: "POST", headerNames: ["Authorization"], body: { a: 1 } },
        to: { url: "http://127.0.0.1:9/y", headerNames: ["Authorization"] },
      },
    ]);
  });

  it("compares a binary body (bodyBase64) as it compares a body", () => {
    const bytes = { url: "http://127.0.0.1:9/x", headers: { authorization: "Bearer s3cret" }, bodyBase64: "AAEC" };
    const have = apiJob("job_1", "j", {
      target: { url: "http://127.0.0.1:9/x", method: "POST", headerNames: ["Authorization"], bodyBase64: "AAEC" },
    });
    expect(planApply([declared("j", { target: bytes })], [have], { prune: false }).changes).toEqual([]);
    const want = declared("j", { target: { ...bytes, bodyBase64: "AAED" } });
    const [change] = planApply([want], [have], { prune: false }).changes;
    if (change?.action !== "update") throw new Error("not an update");
    expect(change.patch).toEqual({ target: want.target });
  });

  it("cannot see a header value changed under the same name (the API shows names only)", () => {
    const want = declared("j", { target: { url: "http://127.0.0.1:9/x", headers: { Authorization: "Bearer other" }, body: { a: 1 } } });
    expect(planApply([want], [apiJob("job_1", "j")], { prune: false }).changes).toEqual([]);
  });

  it("pauses or resumes only a job whose file says paused", () => {
    const paused = apiJob("job_1", "p", { paused: true });
    expect(planApply([declared("p")], [paused], { prune: false }).changes).toEqual([]);
    const [resume] = planApply([declared("p", { paused: false })], [paused], { prune: false }).changes;
    expect(resume).toMatchObject({ action: "update", patch: null, pause: false, fields: [{ field: "paused", from: true, to: false }] });
    const [create] = planApply([declared("q", { paused: true })], [], { prune: false }).changes;
    expect(create).toMatchObject({ action: "create", pause: true, job: { name: "q" } });
    expect(create?.action === "create" && "paused" in create.job).toBe(false);
  });

  it("deletes the jobs the file does not name, unnamed ones too, only with prune; deletes come first", () => {
    const current = [apiJob("job_1", "kept"), apiJob("job_2", "gone"), apiJob("job_3", null)];
    const wanted = [declared("kept", { timeoutMs: 9_000 }), declared("new")];
    expect(planApply(wanted, current, { prune: false }).changes.map((c) => c.action)).toEqual(["update", "create"]);
    expect(planApply(wanted, current, { prune: true }).changes).toMatchObject([
      { action: "delete", name: "gone", id: "job_2" },
      { action: "delete", name: null, id: "job_3" },
      { action: "update", name: "kept" },
      { action: "create", name: "new" },
    ]);
  });

  it("compares a workflow's steps by meaning, and sends changed steps whole without showing a header's value", () => {
    const stepTarget = (path: string) => ({ url: `http://127.0.0.1:9/${path}`, headers: { Authorization: "Bearer s3cret" } });
    const shownTarget = (path: string) => ({ url: `http://127.0.0.1:9/${path}`, method: "POST" as const, headerNames: ["Authorization"] });
    const want = declared("wf", {
      target: undefined,
      steps: [
        { id: "a", target: stepTarget("a") },
        { id: "b", target: stepTarget("b"), retry: { maxAttempts: 2 } },
        { id: "c", target: stepTarget("c"), after: ["b", "a"], when: "all_succeeded" },
      ],
    });
    const have = apiJob("job_1", "wf", {
      target: undefined,
      steps: [
        { id: "a", target: shownTarget("a") },
        { id: "b", target: shownTarget("b"), retry: { ...structuredClone(SERVER_DEFAULTS.retry), maxAttempts: 2 } as Job["retry"] },
        { id: "c", target: shownTarget("c"), after: ["a", "b"] },
      ],
    });
    expect(planApply([want], [have], { prune: false })).toEqual({ changes: [], unchanged: [{ name: "wf", id: "job_1" }] });

    const moved = declared("wf", {
      target: undefined,
      steps: [...want.steps!.slice(0, 2), { id: "c", target: stepTarget("c2"), after: ["a"] }],
    });
    const [change] = planApply([moved], [have], { prune: false }).changes;
    if (change?.action !== "update") throw new Error("not an update");
    expect(change.patch).toEqual({ steps: moved.steps });
    expect(change.fields.map((f) => f.field)).toEqual(["steps"]);
    expect(JSON.stringify(change.fields)).not.toContain("s3cret");
    expect((change.fields[0]!.to as Array<{ target: unknown }>)[2]!.target).toEqual({
      url: "http://127.0.0.1:9/c2",
      headerNames: ["Authorization"],
    });
  });

  it("chains jobs by name: set last, once every job exists; unchanged when the ids stand for the names; taken away when left out", () => {
    const want = [declared("a", { onSuccess: ["b"], onFailure: ["old"] }), declared("b")];
    const first = planApply(want, [apiJob("job_9", "old")], { prune: false }).changes;
    expect(first.map((c) => c.action)).toEqual(["create", "create", "chain"]);
    expect(first[0]).toMatchObject({ action: "create", name: "a" });
    expect(first[0]?.action === "create" && "onSuccess" in first[0].job).toBe(false);
    expect(first[2]).toEqual({
      action: "chain",
      name: "a",
      id: null,
      set: { onSuccess: ["b"], onFailure: ["old"] },
      fields: [
        { field: "onSuccess", from: null, to: ["b"] },
        { field: "onFailure", from: null, to: ["old"] },
      ],
    });

    const current = [apiJob("job_1", "a", { onSuccess: ["job_2"], onFailure: ["job_9"] }), apiJob("job_2", "b"), apiJob("job_9", "old")];
    expect(planApply(want, current, { prune: false }).changes).toEqual([]);
    const [dropped] = planApply([declared("a", { onSuccess: ["b"] }), declared("b")], current, { prune: false }).changes;
    expect(dropped).toEqual({
      action: "chain",
      name: "a",
      id: "job_1",
      set: { onFailure: null },
      fields: [{ field: "onFailure", from: ["old"], to: null }],
    });
    // A name neither in the file nor the tenant's (or one --prune deletes) is refused before any call.
    expect(() => planApply([declared("a", { onSuccess: ["nope"] })], current, { prune: false })).toThrow(/names "nope"/);
    expect(() => planApply(want, current, { prune: true })).toThrow(/names "old"/);
    const twice = [apiJob("job_5", "dup"), apiJob("job_6", "dup")];
    expect(() => planApply([declared("a", { onSuccess: ["dup"] })], twice, { prune: false })).toThrow(/two of the tenant's jobs/);
  });

  it("refuses a name two of the tenant's jobs carry", () => {
    expect(() => planApply([declared("twice")], [apiJob("job_1", "twice"), apiJob("job_2", "twice")], { prune: false })).toThrow(
      AmbiguousName,
    );
  });
});

describe("an apply file", () => {
  it("needs unique names, a schedule and a target or steps, and known fields", () => {
    const job = { name: "a", schedule: { every: "1h" }, target: { url: "http://127.0.0.1:9" } };
    expect(declaredJobs({ jobs: [job] }, "f.yaml")).toEqual([job]);
    const refused = (content: unknown, words: RegExp) => expect(() => declaredJobs(content, "f.yaml")).toThrow(words);
    refused([job], /"jobs:" list/);
    refused({ jobs: [job], prune: true }, /unknown top-level field prune/);
    refused({ jobs: [job, job] }, /"a" is also the name of jobs\[0\]/);
    refused({ jobs: [{ ...job, name: undefined }] }, /jobs\[0\]\.name: every job needs a name/);
    refused({ jobs: [{ ...job, shedule: {} }] }, /unknown field shedule/);
    refused({ jobs: [{ ...job, schedule: { delay: "10m" } }] }, /delay is counted from each apply/);
    refused({ jobs: [{ ...job, target: {} }] }, /a target with a url/);
    refused({ jobs: [{ ...job, steps: [{ id: "s", target: { url: "http://127.0.0.1:9" } }] }] }, /one of them/);
    const workflow = { name: "w", schedule: { every: "1h" }, steps: [{ id: "s", target: { url: "http://127.0.0.1:9" } }] };
    expect(declaredJobs({ jobs: [workflow] }, "f.yaml")).toEqual([workflow]);
    expect(() => declaredJobs({}, "f.yaml")).toThrow(UsageError);
  });
});

describe("the defaults apply assumes", () => {
  it("are the ones the OpenAPI document gives", async () => {
    const { app, OPENAPI_HEAD } = (await import(/* @vite-ignore */ new URL(`../../${APP_MODULE}`, import.meta.url).href)) as AppModule;
    const { components } = app.getOpenAPI31Document(OPENAPI_HEAD as never) as { components: { schemas: Record<string, any> } };
    const { CreateJob, Target, Retry, Backoff } = components.schemas;
    expect({
      method: Target.properties.method.default,
      retry: {
        maxAttempts: Retry.properties.maxAttempts.default,
        backoff: {
          initialMs: Backoff.properties.initialMs.default,
          maxMs: Backoff.properties.maxMs.default,
          factor: Backoff.properties.factor.default,
        },
        jitter: Retry.properties.jitter.default,
      },
      timeoutMs: CreateJob.properties.timeoutMs.default,
      overlap: CreateJob.properties.overlap.default,
      misfire: CreateJob.properties.misfire.default,
      catchupWindow: CreateJob.properties.catchupWindow.default,
    }).toEqual(SERVER_DEFAULTS);
  });
});

describe("apply with a key shown targets reduced", () => {
  it("knows a job a read key sees (its target's origin, its body's hash) from one shown whole, and plans from none", () => {
    expect(shownReduced(apiJob("job_a", "a"))).toBe(false);
    const origin = { url: "http://127.0.0.1:9", method: "POST" as const, headerNames: ["Authorization"], reduced: true as const };
    expect(shownReduced(apiJob("job_a", "a", { target: { ...origin, bodyBytes: 7, bodySha256: "ab" } }))).toBe(true);
    expect(shownReduced(apiJob("job_a", "a", { notify: { url: "http://127.0.0.1:9", on: ["dead"], reduced: true } }))).toBe(true);
    expect(shownReduced(apiJob("job_a", "a", { target: undefined, steps: [{ id: "s", target: origin }] } as Partial<Job>))).toBe(true);
  });
});
