/**
 * What a request refused for its path or its credentials costs: no D1 query beyond the one
 * lookup of a key that could be one, no row of the cost meter, and no Durable Object touched
 * by a completion token edgecron did not issue.
 */
import { createExecutionContext, env, listDurableObjectIds, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { flushWorkerCost } from "../../src/catalog/cost";
import worker from "../../src/index";
import { newApiKey } from "../../src/model/ids";
import { TOKEN } from "./helpers";
import { meteredEnv } from "./metered-env";

/** Calls the Worker with the metered bindings and waits for what it left running (the meter's write). */
async function call(
  bindings: Env,
  method: string,
  path: string,
  init: { token?: string; json?: unknown } = {},
): Promise<{ status: number; code: string | undefined }> {
  const headers = new Headers();
  if (init.token !== undefined) headers.set("Authorization", `Bearer ${init.token}`);
  if (init.json !== undefined) headers.set("Content-Type", "application/json");
  const request = new Request(`https://edgecron.test${path}`, {
    method,
    headers,
    ...(init.json !== undefined && { body: JSON.stringify(init.json) }),
  });
  const ctx = createExecutionContext();
  const res = await worker.fetch(request, bindings, ctx);
  const body = (await res.json()) as { error?: { code: string } };
  await waitOnExecutionContext(ctx);
  return { status: res.status, code: body.error?.code };
}

/** The meter's rows of operations whose name holds `marker`, once every isolate tally is written. */
async function meterRowsNaming(marker: string): Promise<unknown[]> {
  await flushWorkerCost(env.DB, Date.now());
  const { results } = await env.DB.prepare("SELECT operation FROM cost_minutes WHERE instr(operation, ?) > 0").bind(marker).all();
  return results;
}

const letters = (n: number) => Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => String.fromCharCode(97 + (b % 26))).join("");

describe("requests refused for their path or credentials", () => {
  it("a path no route has answers 404 with no D1 query and no meter row, whatever the token", async () => {
    const marker = letters(12);
    const { env: bindings, spent } = meteredEnv({ batch: true });
    for (let i = 0; i < 40; i++) {
      // Half with a key shaped like a real one (which a lookup could find), half with junk.
      const token = i % 2 === 0 ? newApiKey() : `junk-${i}`;
      const res = await call(bindings, i % 3 === 0 ? "POST" : "GET", `/v1/${marker}${letters(6)}`, { token });
      expect(res).toEqual({ status: 404, code: "not_found" });
    }
    expect(spent.queries).toEqual([]);
    expect(spent.shardCalls).toEqual([]);
    expect(await meterRowsNaming(marker)).toEqual([]);
  });

  it("a token that cannot be a key by its form is refused before any D1 query; one that could costs one lookup; neither writes a meter row", async () => {
    const { env: bindings, spent } = meteredEnv({ batch: true });
    for (const token of ["nope", "ek_short", `ek_${"A".repeat(36)}`, `key_${"a".repeat(20)}`]) {
      const res = await call(bindings, "GET", "/v1/jobs", { token });
      expect(res, token).toEqual({ status: 401, code: "unauthorized" });
    }
    expect(spent.queries).toEqual([]);

    for (let i = 0; i < 5; i++) expect((await call(bindings, "GET", "/v1/jobs", { token: newApiKey() })).status).toBe(401);
    expect(spent.queries).toHaveLength(5);
    expect(await meterRowsNaming("GET /v1/jobs")).toEqual([]);
  });

  it("names an authenticated request's operation after its route, not its path", async () => {
    const { env: bindings } = meteredEnv({ batch: true });
    // The default tenant's id is letters only, as a route's own words are.
    const res = await call(bindings, "GET", "/v1/tenants/default", { token: TOKEN });
    expect(res.status).toBe(200);
    const rows = (await meterRowsNaming("/v1/tenants/")) as Array<{ operation: string }>;
    expect(rows.map((r) => r.operation)).toEqual(["GET /v1/tenants/:id"]);
  });

  it.each([
    ["a token of the form shards issue, naming a shard", `shard-99991.1.${"a".repeat(24)}`],
    ["the same with a MAC edgecron did not make", `shard-99992.1.${"a".repeat(24)}.${"A".repeat(43)}`],
  ])("%s, is refused before any Durable Object is touched", async (_label, token) => {
    const shard = token.split(".")[0]!;
    const { env: bindings, spent } = meteredEnv({ batch: true });
    for (const route of ["complete", "heartbeat"]) {
      const json = route === "complete" ? { token, ok: true } : { token, extendMs: 60_000 };
      const res = await call(bindings, "POST", `/v1/runs/run_0000000000000000000_abc/${route}`, { json });
      expect(res).toEqual({ status: 403, code: "invalid_token" });
    }
    expect(spent.shardCalls).toEqual([]);
    // A shard comes into being, and writes its schema, when first called: this one never was.
    const named = env.SHARD.idFromName(shard).toString();
    expect((await listDurableObjectIds(env.SHARD)).map((id) => id.toString())).not.toContain(named);
  });
});
