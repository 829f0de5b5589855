import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { api, createJob, FAR_CRON } from "./helpers";

const target = { url: "http://127.0.0.1:9/hook" };
const valid = { schedule: { every: "30s" }, target };

async function jobCount(): Promise<number> {
  return (await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs").first<{ n: number }>())!.n;
}

/** Each case: a body, the field the error must name, and words the reason must contain. */
const BAD_BODIES: Array<[string, unknown, string, string]> = [
  ["no schedule", { target }, "schedule", ""],
  ["no target", { schedule: { every: "30s" } }, "target", ""],
  ["empty schedule", { schedule: {}, target }, "schedule", "exactly one of cron, at, delay or every"],
  ["two kinds", { schedule: { every: "30s", cron: "* * * * *" }, target }, "schedule", "exactly one"],
  ["invalid cron", { schedule: { cron: "61 * * * *" }, target }, "schedule.cron", "invalid cron expression"],
  ["garbage cron", { schedule: { cron: "every day" }, target }, "schedule.cron", "cron"],
  ["4-field cron", { schedule: { cron: "* * * *" }, target }, "schedule.cron", "5 fields"],
  ["7-field cron", { schedule: { cron: "* * * * * * *" }, target }, "schedule.cron", "5 fields"],
  ["unknown zone", { schedule: { cron: "0 9 * * *", timezone: "Mars/Olympus" }, target }, "schedule.timezone", "unknown IANA time zone"],
  ["zone without cron", { schedule: { every: "1m", timezone: "UTC" }, target }, "schedule.timezone", "only to cron"],
  ["at not an instant", { schedule: { at: "tomorrow" }, target }, "schedule.at", "ISO-8601"],
  ["at without zone", { schedule: { at: "2026-12-01T09:00:00" }, target }, "schedule.at", "ISO-8601"],
  ["every without unit", { schedule: { every: "30" }, target }, "schedule.every", "unit"],
  ["every in weeks", { schedule: { every: "1w" }, target }, "schedule.every", "unit"],
  ["every zero", { schedule: { every: "0s" }, target }, "schedule.every", "unit"],
  ["unknown schedule field", { schedule: { every: "1m", cronn: "x" }, target }, "schedule", ""],
  ["delay and at", { schedule: { delay: "1m", at: "2030-01-01T00:00:00Z" }, target }, "schedule", "exactly one"],
  ["delay without unit", { schedule: { delay: "10" }, target }, "schedule.delay", "unit"],
  [
    "startAt on a one-off",
    { schedule: { at: "2030-01-01T00:00:00Z", startAt: "2030-01-01T00:00:00Z" }, target },
    "schedule.startAt",
    "only to cron and every",
  ],
  ["maxRuns on a one-off", { schedule: { delay: "1m", maxRuns: 2 }, target }, "schedule.maxRuns", "only to cron and every"],
  [
    "endAt before startAt",
    { schedule: { every: "1m", startAt: "2030-01-02T00:00:00Z", endAt: "2030-01-01T00:00:00Z" }, target },
    "schedule.endAt",
    "after startAt",
  ],
  ["maxRuns zero", { schedule: { every: "1m", maxRuns: 0 }, target }, "schedule.maxRuns", ""],
  ["overlap unknown", { ...valid, overlap: "queue" }, "overlap", ""],
  ["misfire unknown", { ...valid, misfire: "all" }, "misfire", ""],
  ["catchupWindow too long", { ...valid, catchupWindow: "30d" }, "catchupWindow", "between"],
  ["jitter not a duration", { ...valid, jitter: "lots" }, "jitter", "unit"],
  ["jitter over an hour", { ...valid, jitter: "2h" }, "jitter", "between"],
  ["url missing", { schedule: { every: "1m" }, target: {} }, "target.url", ""],
  ["url relative", { schedule: { every: "1m" }, target: { url: "/hook" } }, "target.url", "http or https"],
  ["url ftp", { schedule: { every: "1m" }, target: { url: "ftp://example.com/x" } }, "target.url", "http or https"],
  ["method unknown", { schedule: { every: "1m" }, target: { ...target, method: "BREW" } }, "target.method", ""],
  [
    "header name bad",
    { schedule: { every: "1m" }, target: { ...target, headers: { "bad header": "x" } } },
    "target.headers.bad header",
    "header name",
  ],
  ["header value not string", { schedule: { every: "1m" }, target: { ...target, headers: { "X-A": 1 } } }, "target.headers.X-A", ""],
  [
    "reserved header",
    { schedule: { every: "1m" }, target: { ...target, headers: { "Idempotency-Key": "x" } } },
    "target.headers.Idempotency-Key",
    "set by edgecron",
  ],
  // The client's address as a proxy reports it: a target, or edgecron itself, may trust it (the audit log's `client`).
  ...["X-Forwarded-For", "x-real-ip", "CF-Connecting-IP", "True-Client-IP", "Forwarded"].map((name): [string, unknown, string, string] => [
    `client-address header ${name}`,
    { schedule: { every: "1m" }, target: { ...target, headers: { [name]: "203.0.113.7" } } },
    `target.headers.${name}`,
    "names the client's address",
  ]),
  ["GET with body", { schedule: { every: "1m" }, target: { ...target, method: "GET", body: "x" } }, "target.body", "GET"],
  ["body a number", { schedule: { every: "1m" }, target: { ...target, body: 5 } }, "target.body", ""],
  ["unknown target field", { schedule: { every: "1m" }, target: { ...target, timeout: 5 } }, "target", ""],
  ["maxAttempts zero", { ...valid, retry: { maxAttempts: 0 } }, "retry.maxAttempts", ""],
  ["maxAttempts fractional", { ...valid, retry: { maxAttempts: 1.5 } }, "retry.maxAttempts", ""],
  ["maxAttempts huge", { ...valid, retry: { maxAttempts: 1000 } }, "retry.maxAttempts", ""],
  [
    "backoff max below initial",
    { ...valid, retry: { backoff: { initialMs: 5_000, maxMs: 1_000 } } },
    "retry.backoff.maxMs",
    "at least initialMs",
  ],
  ["backoff factor below 1", { ...valid, retry: { backoff: { factor: 0.5 } } }, "retry.backoff.factor", ""],
  ["jitter unknown", { ...valid, retry: { jitter: "some" } }, "retry.jitter", ""],
  ["retryOn a 5xx", { ...valid, retry: { retryOn: [500] } }, "retry.retryOn.0", ""],
  ["timeoutMs too small", { ...valid, timeoutMs: 10 }, "timeoutMs", ""],
  ["timeoutMs too large", { ...valid, timeoutMs: 3_600_000 }, "timeoutMs", ""],
  ["timeoutMs a string", { ...valid, timeoutMs: "30000" }, "timeoutMs", ""],
  ["name empty", { ...valid, name: "" }, "name", ""],
  ["name too long", { ...valid, name: "x".repeat(201) }, "name", ""],
  ["unknown top-level field", { ...valid, priority: 1 }, "(body)", ""],
  ["body an array", [valid], "(body)", ""],
  ["body null", null, "(body)", ""],
];

describe("POST /v1/jobs validation", () => {
  it.each(BAD_BODIES)("%s → 400 naming the field, nothing stored", async (_label, body, field, reason) => {
    const before = await jobCount();
    const res = await api("/v1/jobs", { method: "POST", json: body });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { code: string; message: string; issues: Array<{ path: string; message: string }> } };
    expect(error.code).toBe("invalid_request");
    const issue = error.issues.find((i) => i.path === field);
    expect(issue, `issues: ${JSON.stringify(error.issues)}`).toBeDefined();
    expect(issue!.message).toContain(reason);
    expect(error.message).toContain(field);
    expect(await jobCount()).toBe(before);
  });

  it("malformed JSON → 400 JSON error", async () => {
    const res = await api("/v1/jobs", { method: "POST", body: "{nope", headers: { "Content-Type": "application/json" } });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { code: "bad_request", message: expect.stringContaining("JSON") } });
  });

  it("a body that is not JSON → 415", async () => {
    const res = await api("/v1/jobs", {
      method: "POST",
      body: "schedule=x",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
    });
    expect(res.status).toBe(415);
    expect(await res.json()).toMatchObject({ error: { code: "unsupported_media_type" } });
  });

  it("accepts every schedule kind and fills defaults", async () => {
    for (const schedule of [
      { cron: "*/5 * * * *" },
      { cron: "0 */10 * * * *", timezone: "Europe/Berlin" },
      { cron: "@daily" },
      { at: "2030-01-01T00:00:00+02:00" },
      { every: "90s" },
    ]) {
      const job = await createJob({ schedule, target });
      expect(job).toMatchObject({ retry: { maxAttempts: 3 }, timeoutMs: 30_000, target: { method: "POST" }, paused: false, version: 1 });
      expect(job.id).toMatch(/^job_[0-9a-z]{19}$/);
      expect(job.nextRunAt).not.toBeNull();
    }
  });

  it("stores `at` normalised to UTC", async () => {
    const job = await createJob({ schedule: { at: "2030-01-01T02:00:00+02:00" }, target });
    expect(job.schedule).toEqual({ at: "2030-01-01T00:00:00.000Z" });
    expect(job.nextRunAt).toBe("2030-01-01T00:00:00.000Z");
  });
});

describe("auth", () => {
  it.each([
    ["no header", undefined],
    ["wrong token", "Bearer nope"],
    ["wrong scheme", "Basic dGVzdDp0ZXN0"],
    ["empty bearer", "Bearer "],
  ])("%s → 401 JSON", async (_label, header) => {
    const headers: Record<string, string> = header === undefined ? {} : { Authorization: header };
    const res = await SELF.fetch("https://edgecron.test/v1/jobs", { headers });
    expect(res.status).toBe(401);
    expect(res.headers.get("WWW-Authenticate")).toContain("Bearer");
    expect(await res.json()).toMatchObject({ error: { code: "unauthorized" } });
  });

  it("a rejected token stores nothing", async () => {
    const before = await jobCount();
    const res = await SELF.fetch("https://edgecron.test/v1/jobs", {
      method: "POST",
      headers: { Authorization: "Bearer nope", "Content-Type": "application/json" },
      body: JSON.stringify(valid),
    });
    expect(res.status).toBe(401);
    expect(await jobCount()).toBe(before);
  });

  it("/healthz and /openapi.json need no token", async () => {
    expect((await SELF.fetch("https://edgecron.test/healthz")).status).toBe(200);
    const doc = (await (await SELF.fetch("https://edgecron.test/openapi.json")).json()) as {
      openapi: string;
      paths: Record<string, unknown>;
      components: { schemas: Record<string, unknown> };
    };
    expect(doc.openapi).toMatch(/^3\./);
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        "/v1/jobs",
        "/v1/jobs/{id}",
        "/v1/jobs/{id}/pause",
        "/v1/jobs/{id}/resume",
        "/v1/jobs/{id}/trigger",
        "/v1/jobs/{id}/runs",
        "/v1/jobs/{id}/explain",
        "/v1/breakers",
        "/v1/runs/{id}",
        "/v1/runs/{id}/retry",
        "/v1/runs/{id}/complete",
        "/v1/runs/{id}/heartbeat",
        "/v1/dead-letters",
        "/v1/metrics",
        "/metrics",
        "/v1/jobs/{id}/backfill",
        "/v1/schedules/preview",
        "/v1/tenants",
        "/v1/tenants/{id}/keys",
        "/v1/tenants/{id}/keys/{keyId}",
        "/v1/signing-keys",
        "/v1/signing-keys/rotate",
      ]),
    );
    expect(Object.keys(doc.components.schemas)).toEqual(
      expect.arrayContaining([
        "CreateJob",
        "Job",
        "Run",
        "Attempt",
        "Schedule",
        "Target",
        "Retry",
        "Backoff",
        "Completion",
        "Heartbeat",
        "Metrics",
        "Error",
        "PatchJob",
        "Backfill",
        "PreviewRequest",
        "Preview",
        "Explanation",
        "Breaker",
        "Notify",
      ]),
    );
  });
});

describe("unknown ids and routes", () => {
  it.each([
    ["GET", "/v1/jobs/job_0000000000000000000"],
    ["GET", "/v1/jobs/not-an-id"],
    ["DELETE", "/v1/jobs/job_0000000000000000000"],
    ["POST", "/v1/jobs/job_0000000000000000000/pause"],
    ["POST", "/v1/jobs/job_0000000000000000000/resume"],
    ["POST", "/v1/jobs/job_0000000000000000000/trigger"],
    ["GET", "/v1/jobs/job_0000000000000000000/runs"],
    ["GET", "/v1/runs/run_0000000000000000000_abc"],
    ["GET", "/v1/runs/whatever"],
    ["GET", "/v1/nothing-here"],
  ])("%s %s → 404 JSON", async (method, path) => {
    const res = await api(path, { method });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: { code: "not_found" } });
  });

  it("an unknown run of a known job → 404", async () => {
    const job = await createJob({ schedule: FAR_CRON, target });
    const res = await api(`/v1/runs/run_${job.id.slice(4)}_zzz`);
    expect(res.status).toBe(404);
  });
});

describe("pagination", () => {
  it("pages through jobs newest first without gaps or repeats", async () => {
    const made: string[] = [];
    for (let i = 0; i < 7; i++) made.push((await createJob({ name: `page-${i}`, schedule: FAR_CRON, target })).id);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res = await api(`/v1/jobs?limit=3${cursor ? `&cursor=${cursor}` : ""}`);
      expect(res.status).toBe(200);
      const page = (await res.json()) as { items: Array<{ id: string }>; nextCursor: string | null };
      expect(page.items.length).toBeLessThanOrEqual(3);
      seen.push(...page.items.map((j) => j.id));
      cursor = page.nextCursor;
    } while (cursor);
    expect(new Set(seen).size).toBe(seen.length);
    const ours = seen.filter((id) => made.includes(id));
    expect(ours).toEqual([...made].reverse());
  });

  it.each(["limit=0", "limit=201", "limit=abc", "cursor=zzz"])("bad page query %s → 400", async (query) => {
    const res = await api(`/v1/jobs?${query}`);
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { message: string } };
    expect(error.message).toMatch(/limit|cursor/);
  });

  it("bad runs cursor → 400", async () => {
    const job = await createJob({ schedule: FAR_CRON, target });
    const res = await api(`/v1/jobs/${job.id}/runs?cursor=nope`);
    expect(res.status).toBe(400);
  });

  it("bad trigger Idempotency-Key → 400 naming the header", async () => {
    const job = await createJob({ schedule: FAR_CRON, target });
    const res = await api(`/v1/jobs/${job.id}/trigger`, { method: "POST", headers: { "Idempotency-Key": "has spaces!" } });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { issues: [{ path: "idempotency-key" }] } });
  });
});
