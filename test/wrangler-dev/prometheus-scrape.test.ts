import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import type { Server } from "node:http";
import parse, { type ParsedFamily } from "parse-prometheus-text-format";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack, until as untilOf } from "../support/local-stack";
import { type Hit, startReceiver } from "../support/receiver";

/**
 * GET /metrics of the real stack, as a Prometheus server would scrape it: the text is checked
 * by Prometheus's own `promtool check metrics` (Debian's `prometheus` package; the test is
 * skipped, saying so, where it is not installed), and every query of the Grafana dashboard
 * shipped in ops/grafana/ must name only series the scrape serves, by labels they carry.
 */

const TOKEN = "e2e-prometheus-4d1a-0123456789abcdef";
const DASHBOARD = new URL("../../ops/grafana/edgecron.json", import.meta.url);

let stack: Stack | undefined;
let receiver: { url: string; server: Server; hits: Map<string, Hit[]> } | undefined;
let text = "";

const api = (method: string, path: string, body?: unknown) => stack!.api(method, path, body);
const until = <T>(what: string, timeoutMs: number, check: () => Promise<T | undefined> | T | undefined) =>
  untilOf(what, timeoutMs, check, stack);

const promtool = spawnSync("promtool", ["--version"], { encoding: "utf8" }).status === 0;

beforeAll(async () => {
  receiver = await startReceiver();
  stack = await startStack({ token: TOKEN });
  // A run that succeeds and one that fails for good, so the counters have something in them.
  const jobs: string[] = [];
  for (const [name, query] of [
    ["prom-ok", ""],
    ["prom-bad", "?status=400"],
  ]) {
    const res = await api("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 1_000).toISOString() },
      target: { url: `${receiver.url}/hit/${name}${query}` },
      breaker: false,
    });
    expect(res.status, JSON.stringify(res.json)).toBe(201);
    jobs.push(res.json.id as string);
  }
  await until("both runs finished", 30_000, async () => {
    const states = await Promise.all(jobs.map(async (id) => (await api("GET", `/v1/jobs/${id}/runs`)).json.items?.[0]?.state));
    return states[0] === "succeeded" && states[1] === "failed" ? true : undefined;
  });
  const res = await fetch(`${stack.base}/metrics?window=1h`, { headers: { authorization: `Bearer ${TOKEN}` } });
  expect(res.status).toBe(200);
  text = await res.text();
});

afterAll(async () => {
  if (receiver) await new Promise<void>((resolve) => receiver!.server.close(() => resolve()));
  await stack?.stop();
});

describe("GET /metrics, scraped from the real stack", () => {
  it("counts the runs it made", () => {
    const fs = parse(text);
    const finished = fs.find((f) => f.name === "edgecron_runs_finished_total")!;
    expect(finished.type).toBe("COUNTER");
    expect(finished.metrics.find((m) => m.labels?.outcome === "succeeded")?.value).toBe("1");
    expect(finished.metrics.find((m) => m.labels?.outcome === "failed")?.value).toBe("1");
  });

  it("passes promtool check metrics (format and Prometheus's naming lint)", (ctx) => {
    if (!promtool) {
      console.warn("skipped: promtool is not installed (Debian: apt-get install prometheus)");
      ctx.skip();
    }
    const checked = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
    expect({ status: checked.status, out: `${checked.stdout}${checked.stderr}` }).toEqual({ status: 0, out: "" });
  });

  it("the Grafana dashboard queries only series the scrape serves, by labels they have", () => {
    const served = servedSeries(parse(text));
    const dashboard = JSON.parse(readFileSync(DASHBOARD, "utf8")) as {
      panels: Array<{ title: string; targets?: Array<{ expr: string }> }>;
    };
    const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
    expect(exprs.length).toBeGreaterThan(0);
    for (const { panel, expr } of exprs) {
      const names = expr.match(/\bedgecron_[a-zA-Z0-9_:]*/g) ?? [];
      expect(names.length, `${panel}: ${expr} names a series`).toBeGreaterThan(0);
      for (const name of names) expect(served.has(name), `${panel}: ${name} is served`).toBe(true);
      const labels = new Set(names.flatMap((n) => [...(served.get(n) ?? [])]));
      for (const clause of expr.matchAll(/\bby\s*\(([^)]*)\)/g)) {
        for (const label of clause[1]!.split(",").map((l) => l.trim())) {
          expect(labels.has(label), `${panel}: ${expr} groups by ${label}, which its series carry`).toBe(true);
        }
      }
    }
  });
});

/** Every sample name the text holds (a histogram's `_bucket`, `_sum` and `_count`), with its label names. */
function servedSeries(families: ParsedFamily[]): Map<string, Set<string>> {
  const served = new Map<string, Set<string>>();
  const add = (name: string, labels: Iterable<string>) => served.set(name, new Set([...(served.get(name) ?? []), ...labels]));
  for (const f of families) {
    const labels = f.metrics.flatMap((m) => Object.keys(m.labels ?? {}));
    if (f.type === "HISTOGRAM") {
      add(`${f.name}_bucket`, [...labels, "le"]);
      add(`${f.name}_sum`, labels);
      add(`${f.name}_count`, labels);
    } else {
      add(f.name, labels);
    }
  }
  return served;
}
