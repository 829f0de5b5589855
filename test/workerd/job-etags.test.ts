import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { patchJob } from "../../src/app/jobs";
import { api, createJob, FAR_CRON, receiverPath } from "./helpers";

const job = () => createJob({ schedule: FAR_CRON, target: { url: receiverPath("etag") } });

/**
 * The real catalog, with its reads of one job held until `n` of them are under way: so that
 * concurrent changes all read the job before any of them writes, the interleaving that loses
 * an update when a change is not a compare-and-set.
 */
function readsHeldTogether(n: number): D1Database {
  let arrived = 0;
  let release!: () => void;
  const together = new Promise<void>((resolve) => {
    release = resolve;
  });
  return new Proxy(env.DB, {
    get(target, prop) {
      if (prop === "prepare") {
        return (sql: string) => {
          const stmt = target.prepare(sql);
          if (!sql.startsWith("SELECT * FROM jobs WHERE id = ?")) return stmt;
          const bind = stmt.bind.bind(stmt);
          stmt.bind = (...values: unknown[]) => {
            const bound = bind(...values);
            const first = bound.first.bind(bound) as () => Promise<unknown>;
            bound.first = (async () => {
              const row = await first();
              if (arrived < n && ++arrived === n) release();
              if (arrived <= n) await together;
              return row;
            }) as typeof bound.first;
            return bound;
          };
          return stmt;
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

describe("a job's ETag and If-Match", () => {
  it("two concurrent PATCHes of different fields both survive", async () => {
    const { id } = await job();
    const held = { ...env, DB: readsHeldTogether(2) };
    const [a, b] = await Promise.all([
      patchJob(held, { admin: true }, id, { timeoutMs: 45_000 }),
      patchJob(held, { admin: true }, id, { overlap: "forbid" }),
    ]);
    expect(new Set([a.job.version, b.job.version])).toEqual(new Set([2, 3]));
    const res = await api(`/v1/jobs/${id}`);
    expect(await res.json()).toMatchObject({ version: 3, timeoutMs: 45_000, overlap: "forbid" });
  });

  it("many concurrent PATCHes through the API, each of its own field: every change is there", async () => {
    const { id } = await job();
    const patches = [
      { timeoutMs: 45_000 },
      { overlap: "forbid" },
      { misfire: "skip" },
      { catchupWindow: "2h" },
      { jitter: "5s" },
      { maxConcurrency: 3 },
      { ratePerSecond: 2 },
      { pauseAfterFailures: 7 },
    ];
    const answers = await Promise.all(patches.map((json) => api(`/v1/jobs/${id}`, { method: "PATCH", json })));
    // Each compare-and-set round has a winner: 8 writers need at most 8 attempts, within the 10 a PATCH makes.
    expect(answers.map((r) => r.status)).toEqual(patches.map(() => 200));
    const after = await (await api(`/v1/jobs/${id}`)).json();
    expect(after).toMatchObject({ version: 1 + patches.length, ...Object.assign({}, ...patches) });
  });

  it("GET, POST and PATCH answer the job's ETag, from its version", async () => {
    const created = await api("/v1/jobs", { method: "POST", json: { schedule: FAR_CRON, target: { url: receiverPath("etag") } } });
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: string };
    expect(created.headers.get("ETag")).toBe('"v1"');
    expect((await api(`/v1/jobs/${id}`)).headers.get("ETag")).toBe('"v1"');
    const patched = await api(`/v1/jobs/${id}`, { method: "PATCH", json: { timeoutMs: 40_000 } });
    expect(patched.headers.get("ETag")).toBe('"v2"');
    expect((await api(`/v1/jobs/${id}/pause`, { method: "POST" })).headers.get("ETag")).toBe('"v3"');
  });

  it("If-Match: a stale ETag is refused with 412 and changes nothing; the current one is taken", async () => {
    const { id } = await job();
    await api(`/v1/jobs/${id}`, { method: "PATCH", json: { timeoutMs: 40_000 } });
    const stale = { "If-Match": '"v1"' };
    for (const [path, method, json] of [
      [`/v1/jobs/${id}`, "PATCH", { overlap: "forbid" }],
      [`/v1/jobs/${id}/pause`, "POST", undefined],
      [`/v1/jobs/${id}`, "DELETE", undefined],
    ] as const) {
      const res = await api(path, { method, json, headers: stale });
      expect(res.status, `${method} ${path}`).toBe(412);
      expect(res.headers.get("ETag")).toBe('"v2"');
      expect(await res.json()).toMatchObject({ error: { code: "precondition_failed" } });
    }
    const unchanged = await (await api(`/v1/jobs/${id}`)).json();
    expect(unchanged).toMatchObject({ version: 2, overlap: "allow", paused: false });

    const current = await api(`/v1/jobs/${id}`, { method: "PATCH", json: { overlap: "forbid" }, headers: { "If-Match": '"v2"' } });
    expect(current.status).toBe(200);
    expect(current.headers.get("ETag")).toBe('"v3"');
    const either = await api(`/v1/jobs/${id}/pause`, { method: "POST", headers: { "If-Match": '"v1", "v3"' } });
    expect(either.status).toBe(200);
    const any = await api(`/v1/jobs/${id}`, { method: "DELETE", headers: { "If-Match": "*" } });
    expect(any.status).toBe(200);
  });

  it("a malformed If-Match is a 400 naming it, and changes nothing", async () => {
    const { id } = await job();
    const res = await api(`/v1/jobs/${id}`, { method: "PATCH", json: { timeoutMs: 40_000 }, headers: { "If-Match": "v1" } });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { issues: [{ path: "if-match" }] } });
    expect(await (await api(`/v1/jobs/${id}`)).json()).toMatchObject({ version: 1, timeoutMs: 30_000 });
  });
});
