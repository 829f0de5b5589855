import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { createJobs } from "../../src/app/create-jobs";
import { createClient } from "../../src/client";
import type { Job } from "../../src/model/job";
import { MAX_BOUND_PARAMETERS } from "../../src/sql";
import { api, createJob, createTenant, FAR_CRON, fireNow, hitsOf, listRuns, receiverPath, TOKEN, waitForRun } from "./helpers";

type Item = { index: number; status: number; job?: Job; error?: { code: string; message: string; issues?: Array<{ path: string }> } };
type Answer = { created: number; failed: number; results: Item[] };

const valid = (name: string, url = receiverPath("batch")) => ({ name, schedule: FAR_CRON, target: { url }, breaker: false });

async function batch(jobs: unknown[], as: typeof api = api): Promise<{ status: number; body: Answer & { error?: Item["error"] } }> {
  const res = await as("/v1/jobs/batch", { method: "POST", json: { jobs } });
  return { status: res.status, body: await res.json() };
}

/** The catalog's live jobs of a tenant, read straight from D1. */
const liveJobs = async (tenantId: string) =>
  (await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = ? AND deleted_at IS NULL").bind(tenantId).first<{ n: number }>())!
    .n;

describe("POST /v1/jobs/batch", () => {
  it("answers each item in order: valid ones created as POST /v1/jobs creates them, invalid ones named and not written", async () => {
    const t = await createTenant();
    const items = [
      valid("first"),
      { ...valid("bad-cron"), schedule: { cron: "99 * * * *" } },
      valid("third"),
      { ...valid("unknown-field"), colour: "blue" },
      { ...valid("bad-url"), target: { url: "ftp://127.0.0.1/x" } },
      "not an object",
      valid("seventh"),
    ];
    const { status, body } = await batch(items, t.api);
    expect(status).toBe(200);
    expect(body.results.map((r) => [r.index, r.status])).toEqual([
      [0, 201],
      [1, 400],
      [2, 201],
      [3, 400],
      [4, 400],
      [5, 400],
      [6, 201],
    ]);
    expect(body).toMatchObject({ created: 3, failed: 4 });
    const paths = (i: number) => body.results[i]!.error!.issues!.map((x) => x.path);
    expect(paths(1)).toEqual(["jobs[1].schedule.cron"]);
    expect(body.results[1]!.error!.message).toMatch(/^jobs\[1\]\.schedule\.cron: /);
    expect(paths(3)).toEqual(["jobs[3]"]);
    expect(body.results[3]!.error!.message).toMatch(/colour/);
    expect(paths(4)).toEqual(["jobs[4].target.url"]);
    expect(paths(5)).toEqual(["jobs[5]"]);

    // A created item is the job as POST /v1/jobs answers it, and readable as any job.
    const created = body.results.filter((r) => r.status === 201).map((r) => r.job!);
    expect(created.map((j) => j.name)).toEqual(["first", "third", "seventh"]);
    const single = await createJob(valid("single"), t.api);
    for (const job of created) {
      expect(Object.keys(job).sort()).toEqual(Object.keys(single).sort());
      expect(job).toMatchObject({ tenantId: t.id, version: 1, paused: false, nextRunAt: single.nextRunAt });
      const res = await t.api(`/v1/jobs/${job.id}`);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ id: job.id, name: job.name });
    }
    // Nothing of the invalid items was written.
    expect(await liveJobs(t.id)).toBe(4);
  });

  it("refuses more than 1,000 items, or none, whole: 400 naming jobs, nothing written", async () => {
    const t = await createTenant();
    const tooMany = await batch(
      Array.from({ length: 1_001 }, (_, i) => valid(`n${i}`, "http://127.0.0.1:9/x")),
      t.api,
    );
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.error).toMatchObject({ code: "invalid_request", issues: [{ path: "jobs" }] });
    const none = await batch([], t.api);
    expect(none.status).toBe(400);
    expect(none.body.error!.issues![0]!.path).toBe("jobs");
    const notAList = await t.api("/v1/jobs/batch", { method: "POST", json: { jobs: { name: "x" } } });
    expect(notAList.status).toBe(400);
    expect(await liveJobs(t.id)).toBe(0);
  });

  it("takes 1,000 jobs in one request: one applyJobs per shard, inserts in one D1 batch within the bound-parameter limit", async () => {
    const seen = { batches: [] as number[], maxParams: 0, applyJobs: new Map<string, number>() };
    // The real bindings, watched: the D1 batches and each statement's parameters, the shard calls.
    const db = new Proxy(env.DB, {
      get(target, prop) {
        if (prop === "prepare") {
          return (sql: string) => {
            const stmt = target.prepare(sql);
            const bind = stmt.bind.bind(stmt);
            stmt.bind = (...values: unknown[]) => {
              seen.maxParams = Math.max(seen.maxParams, values.length);
              return bind(...values);
            };
            return stmt;
          };
        }
        if (prop === "batch") {
          return (statements: D1PreparedStatement[]) => {
            seen.batches.push(statements.length);
            return target.batch(statements);
          };
        }
        const value = Reflect.get(target, prop, target) as unknown;
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const shards = new Proxy(env.SHARD, {
      get(target, prop) {
        if (prop === "get") {
          return (id: DurableObjectId) => {
            const stub = target.get(id);
            return new Proxy(stub, {
              get(s, method) {
                const value = Reflect.get(s, method, s) as unknown;
                if (method !== "applyJobs" || typeof value !== "function") return value;
                return (...args: unknown[]) => {
                  seen.applyJobs.set(id.toString(), (seen.applyJobs.get(id.toString()) ?? 0) + 1);
                  return Reflect.apply(value as (...a: unknown[]) => unknown, s, args);
                };
              },
            });
          };
        }
        const value = Reflect.get(target, prop, target) as unknown;
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const items = Array.from({ length: 1_000 }, (_, i) => valid(`k${i}`, "http://127.0.0.1:9/none"));
    const outcomes = await createJobs({ ...env, DB: db, SHARD: shards }, { admin: true }, items);
    const jobs = outcomes.map((o) => ("state" in o ? o.state.job : null));
    expect(jobs.every((j) => j !== null)).toBe(true);
    const shardsUsed = new Set(jobs.map((j) => j!.shard));
    expect(shardsUsed.size).toBeGreaterThan(100);
    expect(seen.applyJobs.size).toBe(shardsUsed.size);
    expect([...seen.applyJobs.values()].every((n) => n === 1)).toBe(true);
    // The admin's tenant is read with its room (one statement), then one batch of inserts.
    expect(seen.batches).toHaveLength(1);
    expect(seen.maxParams).toBeLessThanOrEqual(MAX_BOUND_PARAMETERS);
    const ids = jobs.map((j) => j!.id);
    const found = await env.DB.prepare(`SELECT COUNT(*) AS n FROM jobs WHERE id IN (SELECT value FROM json_each(?))`)
      .bind(JSON.stringify(ids))
      .first<{ n: number }>();
    expect(found!.n).toBe(1_000);
  }, 120_000); // 1,000 jobs through the API in one workerd thread: minutes on a loaded machine, never a time limit on speed

  it("is scoped to the caller's tenant: jobs are its own, chains only to its own jobs", async () => {
    const [a, b] = [await createTenant(), await createTenant()];
    const bJob = await createJob(valid("b-job"), b.api);
    const aJob = await createJob(valid("a-job"), a.api);
    const { body } = await batch(
      [valid("mine"), { ...valid("chain-other"), onSuccess: [bJob.id] }, { ...valid("chain-own"), onSuccess: [aJob.id] }],
      a.api,
    );
    expect(body.results.map((r) => r.status)).toEqual([201, 400, 201]);
    expect(body.results[1]!.error!.issues![0]!.path).toBe("jobs[1].onSuccess.0");
    const mine = body.results[0]!.job!;
    expect(mine.tenantId).toBe(a.id);
    expect((await b.api(`/v1/jobs/${mine.id}`)).status).toBe(404);
    expect((await a.api(`/v1/jobs/${mine.id}`)).status).toBe(200);
    // Without credentials nothing is created.
    const anonymous = await api("/v1/jobs/batch", {
      method: "POST",
      json: { jobs: [valid("x")] },
      headers: { Authorization: "Bearer nope" },
    });
    expect(anonymous.status).toBe(401);
  });

  it("keeps the quota as single creates do: the first items that fit are created, the rest answered 403", async () => {
    const t = await createTenant({ maxJobs: 3 });
    await createJob(valid("existing"), t.api);
    const { body } = await batch([valid("q1"), { ...valid("q-bad"), timeoutMs: 1 }, valid("q2"), valid("q3"), valid("q4")], t.api);
    expect(body.results.map((r) => r.status)).toEqual([201, 400, 201, 403, 403]);
    expect(body.results[3]!.error).toMatchObject({ code: "quota_exceeded" });
    expect(body.results[3]!.error!.message).toMatch(/^jobs\[3\]: this tenant may have at most 3 live jobs/);
    expect(await liveJobs(t.id)).toBe(3);
    const full = await batch([valid("q5")], t.api);
    expect(full.body.results[0]).toMatchObject({ status: 403, error: { code: "quota_exceeded" } });
    expect(await liveJobs(t.id)).toBe(3);
  });

  it("the jobs it creates fire", async () => {
    const urls = Array.from({ length: 5 }, (_, i) => receiverPath(`batch-fire-${i}`));
    const { body } = await batch(urls.map((url, i) => valid(`fire-${i}`, url)));
    expect(body.created).toBe(5);
    for (const [i, item] of body.results.entries()) {
      const job = item.job!;
      await fireNow(job);
      const [run] = await listRuns(job.id);
      await waitForRun(run!.id, ["succeeded"]);
      expect(await hitsOf(urls[i]!)).toHaveLength(1);
    }
  });

  it("the typed client's createMany answers each item", async () => {
    const client = createClient({ baseUrl: "https://edgecron.test", token: TOKEN, fetch: (request) => SELF.fetch(request) });
    const answer = await client.jobs.createMany([
      { schedule: FAR_CRON, target: { url: receiverPath("client") } },
      { schedule: { cron: "nope" }, target: { url: receiverPath("client") } },
    ]);
    expect(answer.results.map((r) => r.status)).toEqual([201, 400]);
    const [made] = answer.results;
    expect(made && "job" in made && made.job.version).toBe(1);
  });
});
