import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, EdgecronError } from "../../src/client/index.ts";
import { type Stack, startStack } from "../support/local-stack";
import { startReceiver } from "../support/receiver";

/**
 * The CLI (bin/edgecron.mjs) as a user runs it, a child process against one real local stack
 * (started as `npm start` does), with a real loopback receiver as the targets.
 */

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const BIN = join(ROOT, "bin", "edgecron.mjs");
const TOKEN = "e2e-cli-token-4b1d-0123456789abcdef";

let stack: Stack | undefined;
let receiver: { url: string; server: Server } | undefined;
let scratch = "";

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout parsed, for --json. */
  json: any;
}

/** Runs the CLI with the stack's URL and the admin token in its environment (or `env`'s). */
function cli(args: string[], env: Record<string, string | undefined> = {}): Promise<Result> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: scratch,
      env: {
        ...process.env,
        EDGECRON_URL: stack!.base,
        EDGECRON_TOKEN: TOKEN,
        // No config file of the machine's user: each test says where its settings come from.
        XDG_CONFIG_HOME: join(scratch, "no-config"),
        TZ: "America/New_York",
        ...env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c));
    child.stderr.on("data", (c: Buffer) => (stderr += c));
    child.on("error", reject);
    child.on("close", (code) => {
      let json: any;
      try {
        json = JSON.parse(stdout);
      } catch {}
      resolve({ code, stdout, stderr, json });
    });
  });
}

/** The CLI's result, which must have exited with `code`, else the failure shows its output. */
async function expectExit(args: string[], code: number, env?: Record<string, string | undefined>): Promise<Result> {
  const result = await cli(args, env);
  expect(result.code, `edgecron ${args.join(" ")}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`).toBe(code);
  return result;
}

const file = (name: string, text: string) => {
  const path = join(scratch, name);
  writeFileSync(path, text);
  return path;
};

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), "edgecron-cli-"));
  receiver = await startReceiver();
  stack = await startStack({ token: TOKEN });
});

afterAll(async () => {
  if (receiver) await new Promise<void>((resolve) => receiver!.server.close(() => resolve()));
  await stack?.stop();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe("edgecron, the CLI, against a local stack", () => {
  it("creates, lists, gets, pauses, resumes and deletes a job, with --json", async () => {
    const created = await expectExit(
      [
        "jobs",
        "create",
        "--json",
        "--name",
        "cli-crud",
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--target",
        `${receiver!.url}/hit/crud`,
      ],
      0,
    );
    const job = created.json;
    expect(job).toMatchObject({ name: "cli-crud", schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" }, paused: false });
    expect(job.description).toMatch(/09:00 AM.*Europe\/Berlin/);

    const listed = await expectExit(["jobs", "list", "--json"], 0);
    expect(listed.json.map((j: any) => j.id)).toContain(job.id);
    const table = await expectExit(["jobs", "list"], 0);
    expect(table.stdout).toContain(job.id);
    expect(table.stdout).toContain("NEXT RUN (America/New_York)");

    expect((await expectExit(["jobs", "get", job.id, "--json"], 0)).json).toMatchObject({ id: job.id, name: "cli-crud" });
    expect((await expectExit(["jobs", "pause", job.id, "--json"], 0)).json).toMatchObject({ paused: true, nextRunAt: null });
    const resumed = (await expectExit(["--json", "jobs", "resume", job.id], 0)).json;
    expect(resumed).toMatchObject({ paused: false, nextRunAt: expect.any(String) });

    const patched = await expectExit(["jobs", "patch", job.id, "--json", "--every", "1h", "--timeout-ms", "5000"], 0);
    expect(patched.json).toMatchObject({ schedule: { every: "1h" }, timeoutMs: 5000, version: job.version + 3 });

    expect((await expectExit(["jobs", "delete", job.id, "--json"], 0)).json).toEqual({ id: job.id, deleted: true });
    expect((await expectExit(["jobs", "list", "--json"], 0)).json.map((j: any) => j.id)).not.toContain(job.id);
  });

  it("shows the audit log: the changes above, filtered, as a table and as JSON; a read-only key is refused", async () => {
    const created = await expectExit(
      ["jobs", "create", "--json", "--name", "cli-audit", "--every", "1h", "--target", `${receiver!.url}/hit/audit`],
      0,
    );
    const id = created.json.id as string;
    await expectExit(["jobs", "pause", id, "--json"], 0);
    const entries = (await expectExit(["audit", "--json", "--subject", id], 0)).json;
    expect(entries.map((e: any) => e.action)).toEqual(["job.pause", "job.create"]);
    expect(entries[0]).toMatchObject({ actor: "admin", subject: id, change: { before: { paused: false }, after: { paused: true } } });
    expect((await expectExit(["audit", "--json", "--action", "job.create", "--limit", "1"], 0)).json).toHaveLength(1);
    const table = await expectExit(["audit", "--subject", id], 0);
    expect(table.stdout).toContain("AT (America/New_York)");
    expect(table.stdout).toMatch(/job\.pause/);
    await expectExit(["audit", "--since", "yesterday"], 1);
    const tenant = await stack!.api("POST", "/v1/tenants", { name: "cli-audit" });
    const reader = await stack!.api("POST", `/v1/tenants/${tenant.json.id}/keys`, { scopes: ["read"] });
    const refused = await expectExit(["audit"], 1, { EDGECRON_TOKEN: reader.json.apiKey });
    expect(refused.stderr).toMatch(/403 insufficient_scope.*"admin"/);
  });

  it("exits 3 for an unknown job, 2 for a bad command line, 1 for a definition the API refuses", async () => {
    const missing = await expectExit(["jobs", "get", "job_0000000000000000000"], 3);
    expect(missing.stderr).toMatch(/404 not_found/);
    await expectExit(["runs", "retry", "run_nope"], 3);

    expect((await expectExit(["jobs", "frobnicate"], 2)).stderr).toMatch(/unknown command/);
    expect((await expectExit(["jobs", "list", "--limit", "many"], 2)).stderr).toMatch(/not a whole number/);
    expect((await expectExit(["jobs", "create", "--every", "1m", "--cron", "* * * * *"], 2)).stderr).toMatch(/not --cron and --every/);
    expect((await expectExit(["jobs", "list"], 2, { EDGECRON_TOKEN: undefined })).stderr).toMatch(/needs a token/);

    const refused = await expectExit(["jobs", "create", "--cron", "61 * * * *", "--target", `${receiver!.url}/hit/bad`], 1);
    expect(refused.stderr).toMatch(/400 invalid_request/);
    expect(refused.stderr).toMatch(/schedule\.cron: /);

    expect((await expectExit(["jobs", "list"], 1, { EDGECRON_TOKEN: "wrong" })).stderr).toMatch(/401 unauthorized/);
  });

  it("takes url and token from --config, under the environment, under flags", async () => {
    const config = file("config.json", JSON.stringify({ url: stack!.base, token: TOKEN }));
    await expectExit(["jobs", "list", "--config", config], 0, { EDGECRON_URL: undefined, EDGECRON_TOKEN: undefined });
    await expectExit(["jobs", "list", "--config", config], 1, { EDGECRON_URL: undefined, EDGECRON_TOKEN: "wrong" });
    await expectExit(["jobs", "list", "--config", config, "--token", TOKEN], 0, { EDGECRON_TOKEN: "wrong" });
    await expectExit(["jobs", "list", "--config", join(scratch, "absent.json")], 2);
  });

  it("previews a schedule in words, its fires in local time and in the job's zone", async () => {
    const preview = await expectExit(
      ["preview", "--cron", "30 9 * * *", "--tz", "Asia/Tokyo", "--count", "3", "--from", "2026-06-01T00:00:00Z"],
      0,
    );
    expect(preview.stdout).toContain("At 09:30 AM (Asia/Tokyo)");
    expect(preview.stdout).toMatch(/America\/New_York.*Asia\/Tokyo.*UTC/);
    // 09:30 in Tokyo (UTC+9) is 00:30 UTC and 20:30 the evening before in New York (EDT, UTC-4).
    expect(preview.stdout).toContain("2026-06-01 09:30:00 GMT+9");
    expect(preview.stdout).toContain("2026-05-31 20:30:00 EDT");
    const json = (await expectExit(["preview", "--json", "--every", "15m", "--count", "2", "--from", "2026-06-01T00:00:00Z"], 0)).json;
    expect(json).toEqual({ description: "Every 15 minutes", instants: ["2026-06-01T00:15:00.000Z", "2026-06-01T00:30:00.000Z"] });
    await expectExit(["preview"], 2);
  });

  it("backfills a range of more fires than one call takes, in several calls; again, it creates none", async () => {
    const job = (
      await expectExit(
        ["jobs", "create", "--json", "--name", "cli-backfill", "--cron", "*/10 * * * * *", "--target", `${receiver!.url}/hit/bf`],
        0,
      )
    ).json;
    // Three hours of a fire every 10 s: 1,081 fires, over the API's 1,000 a call.
    const range = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T03:00:00Z"];
    const first = (await expectExit(["backfill", job.id, ...range, "--json"], 0)).json;
    expect(first.created).toHaveLength(1_081);
    expect(first.existing).toHaveLength(0);
    expect(first.calls).toBeGreaterThan(2);
    const again = await expectExit(["backfill", job.id, ...range], 0);
    expect(again.stdout).toMatch(/^0 runs created, 1081 already existed \(\d+ calls\)$/m);
    await expectExit(["jobs", "delete", job.id], 0);
  });

  it("applies a file: a dry run changes nothing, then creates, patches, changes nothing twice, and prunes", async () => {
    const tenant = await stack!.api("POST", "/v1/tenants", { name: "cli-apply" });
    expect(tenant.status, JSON.stringify(tenant.json)).toBe(201);
    const key = { EDGECRON_TOKEN: tenant.json.apiKey as string };
    const jobsOfTenant = async () => (await expectExit(["jobs", "list", "--json"], 0, key)).json as any[];
    const target = `${receiver!.url}/hit/apply`;
    const v1 = file(
      "jobs.yaml",
      `jobs:
  - name: nightly-export
    schedule: { cron: "0 2 * * *", timezone: Europe/Berlin }
    target:
      url: ${target}
      headers: { Authorization: Bearer s3cret-value }
      body: { report: nightly }
  - name: heartbeat
    schedule: { every: 1h }
    target: { url: ${target}, method: GET }
    retry: { maxAttempts: 5 }
`,
    );

    const dry = await expectExit(["apply", "-f", v1, "--dry-run"], 0, key);
    expect(dry.stdout).toContain("+ create nightly-export");
    expect(dry.stdout).toContain("+ create heartbeat");
    expect(dry.stdout).toContain("2 to create, 0 to update, 0 to delete, 0 unchanged");
    expect(dry.stdout).toContain("dry run: nothing was changed");
    expect(await jobsOfTenant()).toEqual([]);

    const applied = await expectExit(["apply", "-f", v1, "--json"], 0, key);
    expect(applied.json).toMatchObject({ applied: true, changes: [{ action: "create" }, { action: "create" }] });
    const created = await jobsOfTenant();
    expect(created.map((j) => j.name).sort()).toEqual(["heartbeat", "nightly-export"]);
    expect(created.find((j) => j.name === "nightly-export")).toMatchObject({
      target: { headerNames: ["Authorization"], body: { report: "nightly" } },
    });
    expect(created.find((j) => j.name === "heartbeat")).toMatchObject({ retry: { maxAttempts: 5 }, target: { method: "GET" } });

    const second = await expectExit(["apply", "-f", v1], 0, key);
    expect(second.stdout).toContain("nothing to change: 2 jobs match");
    expect((await jobsOfTenant()).map((j) => j.version)).toEqual([1, 1]);

    // heartbeat: another interval, and retry left out (back to the default); nightly-export paused.
    const v2 = file(
      "jobs-v2.yaml",
      `jobs:
  - name: nightly-export
    schedule: { cron: "0 2 * * *", timezone: Europe/Berlin }
    target:
      url: ${target}
      headers: { Authorization: Bearer s3cret-value }
      body: { report: nightly }
    paused: true
  - name: heartbeat
    schedule: { every: 30m }
    target: { url: ${target}, method: GET }
`,
    );
    const dryUpdate = await expectExit(["apply", "-f", v2, "--dry-run"], 0, key);
    expect(dryUpdate.stdout).toMatch(/~ update nightly-export job_\w+\n {4}paused: false → true/);
    expect(dryUpdate.stdout).toMatch(/~ update heartbeat job_\w+\n {4}schedule: \{"every":"1h"\} → \{"every":"30m"\}\n {4}retry: /);
    expect((await jobsOfTenant()).map((j) => j.version)).toEqual([1, 1]);
    await expectExit(["apply", "-f", v2], 0, key);
    const updated = await jobsOfTenant();
    expect(updated.find((j) => j.name === "heartbeat")).toMatchObject({
      schedule: { every: "30m" },
      retry: { maxAttempts: 3 },
      version: 2,
    });
    expect(updated.find((j) => j.name === "nightly-export")).toMatchObject({ paused: true });
    expect((await expectExit(["apply", "-f", v2], 0, key)).stdout).toContain("nothing to change");

    // heartbeat leaves the file: kept without --prune, deleted with it.
    const v3 = file("jobs-v3.yaml", readFileSync(v2, "utf8").split("  - name: heartbeat")[0]!);
    expect((await expectExit(["apply", "-f", v3], 0, key)).stdout).toContain("nothing to change: 1 job matches");
    const pruned = await expectExit(["apply", "-f", v3, "--prune"], 0, key);
    expect(pruned.stdout).toMatch(/- delete heartbeat job_\w+/);
    expect((await jobsOfTenant()).map((j) => j.name)).toEqual(["nightly-export"]);

    // No header value is ever printed, in any of these.
    for (const out of [dry, applied, second, dryUpdate, pruned]) expect(out.stdout + out.stderr).not.toContain("s3cret");
  });

  it("applies a workflow job and the job it chains by name: created, unchanged the second time, a changed step patched", async () => {
    const tenant = await stack!.api("POST", "/v1/tenants", { name: "cli-apply-workflow" });
    expect(tenant.status, JSON.stringify(tenant.json)).toBe(201);
    const key = { EDGECRON_TOKEN: tenant.json.apiKey as string };
    const workflow = (loadPath: string) =>
      file(
        "workflow.yaml",
        `jobs:
  - name: pipeline
    schedule: { cron: "0 3 * * *" }
    steps:
      - { id: extract, target: { url: ${receiver!.url}/hit/extract, headers: { Authorization: Bearer s3cret-step } } }
      - { id: load, after: [extract], retry: { maxAttempts: 2 }, target: { url: ${receiver!.url}/hit/${loadPath} } }
      - { id: alert, after: [load], when: any_failed, target: { url: ${receiver!.url}/hit/alert } }
    onSuccess: [report]
  - name: report
    schedule: { cron: "0 4 * * *" }
    target: { url: ${receiver!.url}/hit/report }
`,
      );
    const created = await expectExit(["apply", "-f", workflow("load"), "--json"], 0, key);
    expect(created.json).toMatchObject({
      applied: true,
      changes: [
        { action: "create", name: "pipeline" },
        { action: "create", name: "report" },
        { action: "chain", name: "pipeline", fields: [{ field: "onSuccess", from: null, to: ["report"] }] },
      ],
    });
    const byName = async () =>
      new Map(((await expectExit(["jobs", "list", "--json"], 0, key)).json as any[]).map((j) => [j.name as string, j]));
    expect((await byName()).get("pipeline").onSuccess).toEqual([(await byName()).get("report").id]);
    expect((await expectExit(["apply", "-f", workflow("load")], 0, key)).stdout).toContain("nothing to change: 2 jobs match");
    const changed = await expectExit(["apply", "-f", workflow("load-v2")], 0, key);
    expect(changed.stdout).toMatch(/~ update pipeline job_\w+\n {4}steps: /);
    const job = (await byName()).get("pipeline");
    expect(job.steps.map((s: { target: { url: string } }) => s.target.url.split("/").at(-1))).toEqual(["extract", "load-v2", "alert"]);
    expect(job.version).toBe(3); // created, chained, its step changed
    for (const out of [created, changed]) expect(out.stdout + out.stderr).not.toContain("s3cret");
  });

  it("with the admin token, applies to the default tenant's jobs only: another tenant's are never pruned", async () => {
    const tenant = await stack!.api("POST", "/v1/tenants", { name: "cli-untouched" });
    const theirs = await stack!.api(
      "POST",
      "/v1/jobs",
      { name: "theirs", schedule: { every: "1h" }, target: { url: `${receiver!.url}/hit/theirs` } },
      { token: tenant.json.apiKey },
    );
    expect(theirs.status).toBe(201);
    const ours = (
      await expectExit(["jobs", "create", "--json", "--name", "ours", "--every", "1h", "--target", `${receiver!.url}/hit/ours`], 0)
    ).json;
    const plan = (await expectExit(["apply", "-f", file("empty.yaml", "jobs: []\n"), "--prune", "--dry-run", "--json"], 0)).json;
    const deleted = plan.changes.map((c: any) => c.id);
    expect(deleted).toContain(ours.id);
    expect(deleted).not.toContain(theirs.json.id);
  });

  it("shows a run and its attempts, and lists a job's runs", async () => {
    const job = (
      await expectExit(["jobs", "create", "--json", "--name", "cli-runs", "--every", "1h", "--target", `${receiver!.url}/hit/runs`], 0)
    ).json;
    const run = (await expectExit(["jobs", "trigger", job.id, "--json", "--idempotency-key", "cli-1"], 0)).json;
    expect(run).toMatchObject({ jobId: job.id, trigger: "manual" });
    expect((await expectExit(["jobs", "trigger", job.id, "--json", "--idempotency-key", "cli-1"], 0)).json.id).toBe(run.id);
    expect((await expectExit(["runs", "list", job.id, "--json"], 0)).json.map((r: any) => r.id)).toEqual([run.id]);
    const shown = await expectExit(["runs", "get", run.id], 0);
    expect(shown.stdout).toContain(run.id);
    expect((await expectExit(["dead-letters", "--job", job.id, "--json"], 0)).json).toEqual([]);
  });

  it("runs as npm exec edgecron from the repository", async () => {
    const result = await new Promise<{ code: number | null; stdout: string }>((resolve, reject) => {
      const child = spawn("npm", ["exec", "--offline", "--", "edgecron", "--version"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      child.stdout.on("data", (c: Buffer) => (stdout += c));
      child.on("error", reject);
      child.on("close", (code) => resolve({ code, stdout }));
    });
    expect(result).toEqual({ code: 0, stdout: "0.1.0\n" });
  });
});

describe("the typed client", () => {
  it("answers typed bodies, and throws EdgecronError with the API's status, code and issues", async () => {
    const client = createClient({ baseUrl: `${stack!.base}/`, token: TOKEN });
    const job = await client.jobs.create({ name: "client", schedule: { every: "1h" }, target: { url: `${receiver!.url}/hit/client` } });
    expect((await client.jobs.get(job.id)).name).toBe("client");
    await client.jobs.delete(job.id);

    const notFound = await client.jobs.get(job.id).catch((e: unknown) => e);
    expect(notFound).toBeInstanceOf(EdgecronError);
    expect(notFound).toMatchObject({ status: 404, code: "not_found" });

    const invalid = await client.jobs.create({ schedule: { every: "1x" }, target: { url: "nope" } }).catch((e: unknown) => e);
    expect(invalid).toMatchObject({ status: 400, code: "invalid_request" });
    expect((invalid as EdgecronError).issues?.map((i) => i.path).sort()).toEqual(["schedule.every", "target.url"]);

    const unauthorized = await createClient({ baseUrl: stack!.base, token: "wrong" })
      .jobs.list()
      .catch((e: unknown) => e);
    expect(unauthorized).toMatchObject({ status: 401, code: "unauthorized" });

    const seen: string[] = [];
    const logged = createClient({
      baseUrl: stack!.base,
      token: TOKEN,
      fetch: (request) => {
        seen.push(request.headers.get("authorization")!);
        return fetch(request);
      },
    });
    await logged.jobs.list({ limit: 1 });
    expect(seen).toEqual([`Bearer ${TOKEN}`]);
  });
});
