/** The API fuzzer (see harness.ts), every route: hostile ids in paths, hostile list queries, methods a path does not serve. */
import fc from "fast-check";
import { describe, it } from "vitest";
import {
  catalog,
  expectAnswered,
  expectCatalog,
  expectRejected,
  fail,
  fuzzFile,
  hostilePiece,
  pctEncode,
  send,
  TIMEOUT,
  validJob,
  whoArb,
} from "./harness";

const fx = fuzzFile("misc");

describe("hostile paths and query strings", () => {
  /** Routes with an id; `allowed` are the statuses a random id may get (403: no admin, or no valid completion token). */
  const ID_ROUTES: Array<{ method: string; path: string; json?: unknown; query?: string; allowed: number[] }> = [
    { method: "GET", path: "/v1/jobs/{id}", allowed: [400, 404] },
    { method: "DELETE", path: "/v1/jobs/{id}", allowed: [400, 404] },
    { method: "PATCH", path: "/v1/jobs/{id}", json: { name: "x" }, allowed: [400, 404] },
    { method: "POST", path: "/v1/jobs/{id}/pause", allowed: [400, 404] },
    { method: "POST", path: "/v1/jobs/{id}/resume", allowed: [400, 404] },
    { method: "POST", path: "/v1/jobs/{id}/trigger", allowed: [400, 404] },
    {
      method: "POST",
      path: "/v1/jobs/{id}/backfill",
      json: { from: "2020-01-01T00:00:00Z", to: "2020-01-02T00:00:00Z" },
      allowed: [400, 404],
    },
    { method: "GET", path: "/v1/jobs/{id}/runs", allowed: [400, 404] },
    { method: "GET", path: "/v1/runs/{id}", allowed: [400, 404] },
    { method: "POST", path: "/v1/runs/{id}/retry", allowed: [400, 404] },
    {
      method: "POST",
      path: "/v1/runs/{id}/complete",
      json: { token: "shard-1.1.abcdefghijklmnopqrstuvwx", ok: true },
      allowed: [400, 403, 404],
    },
    { method: "POST", path: "/v1/runs/{id}/heartbeat", json: { token: "nope" }, allowed: [400, 403, 404] },
    { method: "GET", path: "/v1/tenants/{id}", allowed: [400, 404] },
    { method: "PATCH", path: "/v1/tenants/{id}", json: { limits: { maxJobs: 5 } }, allowed: [400, 403, 404] },
    { method: "POST", path: "/v1/tenants/{id}/keys", allowed: [400, 404] },
    { method: "GET", path: "/v1/tenants/{id}/keys", allowed: [400, 404] },
    { method: "DELETE", path: "/v1/tenants/{id}/keys/{id}", allowed: [400, 404] },
    { method: "DELETE", path: `/v1/tenants/default/keys/{id}`, allowed: [400, 404] },
    { method: "GET", path: "/v1/dead-letters", query: "jobId={id}", allowed: [400, 404] },
    { method: "GET", path: "/v1/signing-keys", query: "tenantId={id}", allowed: [400, 404] },
    { method: "POST", path: "/v1/signing-keys/rotate", query: "tenantId={id}", allowed: [400, 404] },
  ];

  /** Ids of every shape but that of an existing object: well-formed unknown ids, near misses, junk, traversal, huge. */
  const idArb = fc
    .oneof(
      fc.string({ unit: "binary", maxLength: 30 }),
      fc.string({ unit: "binary-ascii", maxLength: 30 }),
      hostilePiece,
      fc.stringMatching(/^job_[0-9a-z]{19}$/),
      fc.stringMatching(/^run_[0-9a-z]{19}_[0-9A-Za-z-]{1,12}$/),
      fc.stringMatching(/^(ten|key)_[0-9a-z]{20}$/),
      fc.constantFrom("job_", "run_", "ten_", "key_", "JOB_0000000000000000000", "job_0000000000000000000 ", "Default", "."),
      fc.integer({ min: 201, max: 5_000 }).map((n) => "j".repeat(n)),
    )
    .filter((s) => s !== "default");
  /** Raw (not encoded) ids from a small alphabet, to try traversal and broken percent-escapes; never "default". */
  const rawIdArb = fc.string({
    unit: fc.constantFrom(".", "/", "%", "2", "e", "f", "F", "0", "a", "_", "?", "#", "\\", ";", "&", "="),
    minLength: 1,
    maxLength: 12,
  });

  it(
    "300 runs: random ids in every path (encoded or raw) → 400/403/404 JSON, never 5xx; nothing changes",
    async () => {
      const before = await catalog(fx);
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(...ID_ROUTES),
          fc.oneof({ arbitrary: idArb.map(pctEncode), weight: 4 }, { arbitrary: rawIdArb, weight: 1 }),
          whoArb,
          async (route, id, who) => {
            const path = route.path.replaceAll("{id}", id) + (route.query ? `?${route.query.replace("{id}", id)}` : "");
            const a = await send({ method: route.method, path, who, json: route.json });
            expectRejected(a, route.allowed);
          },
        ),
        { numRuns: 300 },
      );
      await expectCatalog(fx, before);
    },
    TIMEOUT,
  );

  const LISTS = [
    { path: () => "/v1/jobs", ok: [200, 400] },
    { path: () => `/v1/jobs/${fx.realJob.id}/runs`, ok: [200, 400, 404] }, // 404: a tenant key does not see the admin's job
    { path: () => "/v1/tenants", ok: [200, 400, 403] },
    { path: () => "/v1/dead-letters", ok: [200, 400, 404] },
    { path: () => "/v1/metrics", ok: [200, 400] },
  ];
  const queryValue = fc.oneof(
    fc.constantFrom(
      "1",
      "50",
      "200",
      "201",
      "0",
      "-1",
      "1.5",
      "1e2",
      "1e400",
      "0x10",
      "NaN",
      "Infinity",
      "",
      " 5",
      "5 ",
      "abc",
      "15m",
      "1d",
      "2d",
      "0s",
      "999999999d",
    ),
    fc.integer().map(String),
    fc.stringMatching(/^job_[0-9a-z]{19}$/),
    fc.stringMatching(/^[0-9a-z]{1,12}\.run_[0-9a-z]{19}_[0-9a-z]{1,8}$/),
    fc.string({ unit: "binary", maxLength: 30 }),
    fc.integer({ min: 100, max: 3_000 }).map((n) => "c".repeat(n)),
  );
  const queryArb = fc
    .array(fc.tuple(fc.constantFrom("limit", "cursor", "jobId", "window", "tenantId", "limit", "cursor", "x"), queryValue, fc.boolean()), {
      maxLength: 4,
    })
    .map((pairs) => pairs.map(([k, v, encode]) => `${k}=${encode ? pctEncode(v) : v.replace(/[#\s]/g, "")}`).join("&"));

  it(
    "200 runs: random limit/cursor/window queries on list endpoints → 200 or 400 JSON, never 5xx",
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...LISTS), queryArb, whoArb, async (list, query, who) => {
          const a = await send({ method: "GET", path: `${list.path()}?${query}`, who });
          expectAnswered(a);
          if (!list.ok.includes(a.status)) fail(a, `expected ${list.ok.join(" or ")}`);
          if (a.status === 200 && list.path() !== "/v1/metrics" && !Array.isArray((a.body as { items?: unknown }).items))
            fail(a, "a page without items");
        }),
        { numRuns: 200 },
      );
    },
    TIMEOUT,
  );
});

describe("random HTTP methods on known paths", () => {
  /** Methods workerd's fetch can send (it refuses other tokens before any request is made). */
  const METHODS = [
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "OPTIONS",
    "TRACE",
    "PURGE",
    "COPY",
    "LOCK",
    "MKCOL",
    "MOVE",
    "PROPFIND",
    "PROPPATCH",
    "SEARCH",
    "UNLOCK",
    "ACL",
    "REPORT",
    "MKACTIVITY",
    "CHECKOUT",
    "MERGE",
    "NOTIFY",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "QUERY",
    "BAN",
    "patch",
    "get",
    "delete",
    "Post",
  ];
  /** Each known path with the methods it serves: the fuzzer sends only others (so it never triggers, deletes or rotates). */
  const KNOWN: Array<[() => string, string[]]> = [
    [() => "/v1/jobs", ["GET", "POST"]],
    [() => `/v1/jobs/${fx.realJob.id}`, ["GET", "PATCH", "DELETE"]],
    [() => `/v1/jobs/${fx.realJob.id}/pause`, ["POST"]],
    [() => `/v1/jobs/${fx.realJob.id}/resume`, ["POST"]],
    [() => `/v1/jobs/${fx.realJob.id}/trigger`, ["POST"]],
    [() => `/v1/jobs/${fx.realJob.id}/backfill`, ["POST"]],
    [() => `/v1/jobs/${fx.realJob.id}/runs`, ["GET"]],
    [() => `/v1/runs/${fx.fakeRun}`, ["GET"]],
    [() => `/v1/runs/${fx.fakeRun}/retry`, ["POST"]],
    [() => `/v1/runs/${fx.fakeRun}/complete`, ["POST"]],
    [() => `/v1/runs/${fx.fakeRun}/heartbeat`, ["POST"]],
    [() => "/v1/dead-letters", ["GET"]],
    [() => "/v1/metrics", ["GET"]],
    [() => "/metrics", ["GET"]],
    [() => "/v1/schedules/preview", ["POST"]],
    [() => "/v1/tenants", ["GET", "POST"]],
    [() => `/v1/tenants/${fx.victimTenant}`, ["GET", "PATCH"]],
    [() => `/v1/tenants/${fx.victimTenant}/keys`, ["GET", "POST"]],
    [() => "/v1/signing-keys", ["GET", "PATCH"]],
    [() => "/v1/signing-keys/rotate", ["POST"]],
    [() => "/healthz", ["GET"]],
    [() => "/openapi.json", ["GET"]],
  ];
  const CASES = KNOWN.flatMap(([path, served]) =>
    METHODS.filter((m) => !served.includes(m.toUpperCase()) && !(m === "HEAD" && served.includes("GET"))).map((m) => [path, m] as const),
  );

  it(
    "200 runs: a method a path does not serve → 404/405 JSON, never 5xx; nothing changes",
    async () => {
      const before = await catalog(fx);
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...CASES), fc.boolean(), whoArb, async ([path, method], withBody, who) => {
          const hasBody = withBody && method.toUpperCase() !== "GET" && method !== "HEAD";
          const a = await send({ method, path: path(), who, ...(hasBody && { json: validJob("method") }) });
          if (method === "HEAD") {
            if (![404, 405].includes(a.status)) fail(a, "expected 404 or 405");
            if (!/^application\/json/i.test(a.type)) fail(a, "not JSON");
            return;
          }
          expectRejected(a, [404, 405]);
        }),
        { numRuns: 200 },
      );
      await expectCatalog(fx, before);
    },
    TIMEOUT,
  );
});
