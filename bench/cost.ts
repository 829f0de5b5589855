// The run's cost, as the scheduler's own meters counted it: GET /v1/metrics over a window
// that covers the whole bench (the warm-up and its runs, calibration, creation, the removals,
// the runs, and the bench's own reads of the runs API and of the metrics themselves), divided
// by the runs finished in it.
import type { Stack } from "../test/support/local-stack.ts";

/** Rows one object's table (or one gate operation) wrote per run, from the meter's optional breakdowns. */
export interface TableRows {
  object: string;
  table: string;
  rowsWrittenPerRun: number | null;
}

export interface CostFigures {
  windowMs: number;
  runsFinished: number;
  /** Jobs the bench had answered 201 in the window (warm-up, calibration, workload). */
  jobsCreated: number;
  /** POST /v1/jobs calls the meter counted: those refused for the rate limit too. */
  createCalls: number;
  /** Rate-limit refusals (429) the bench waited out in the window. */
  rateLimited: number;
  perRun: Record<string, number> | null;
  /** Rows written per run by object and table, when the meter breaks them down (cost.shardTables, d1Tables, gateOperations). */
  byTable: TableRows[] | null;
  d1RowsWrittenPerJobCreated: number | null;
  usdPerMillionRuns: number | null;
  meter: Record<string, number>;
  prices: { asOf: string };
  /** The whole `cost` object as the API answered, per operation. */
  cost: unknown;
}

const MAX_WINDOW_MS = 86_400_000;

/** The parts of GET /v1/metrics' `cost` this reads (src/model/cost.ts has all of it). */
interface ApiCost {
  runsFinished: number;
  perRun: Record<string, number> | null;
  usdPerMillionRuns: number | null;
  workerOperations: Record<string, { calls: number; rowsWritten: number }>;
  meter: Record<string, number>;
  prices: { asOf: string };
}

/** The breakdowns of GET /v1/metrics' `cost` (src/model/cost.ts): rows written by table of the shards and of the tenant gates. */
const BREAKDOWNS = [
  ["shardTables", "shard"],
  ["gateTables", "gate"],
] as const;

/** Rows written per run by object and table; null when `cost` has no breakdown (a stack from before the meter kept them). */
export function tableRows(cost: unknown, runsFinished: number): TableRows[] | null {
  if (typeof cost !== "object" || cost === null) return null;
  const out: TableRows[] = [];
  let found = false;
  const per = (n: number | null) => (n === null || runsFinished === 0 ? null : Math.round((n / runsFinished) * 1000) / 1000);
  for (const [field, object] of BREAKDOWNS) {
    const breakdown = (cost as Record<string, unknown>)[field];
    if (typeof breakdown !== "object" || breakdown === null) continue;
    found = true;
    for (const [table, rows] of Object.entries(breakdown))
      out.push({ object, table, rowsWrittenPerRun: per(typeof rows === "number" ? rows : null) });
  }
  return found ? out : null;
}

export async function readCost(stack: Stack, sinceMs: number, bench: { jobsCreated: number; rateLimited: number }): Promise<CostFigures> {
  // Whole minutes, one more for the minute the bench started in.
  const minutes = Math.min(Math.ceil((Date.now() - sinceMs) / 60_000) + 1, MAX_WINDOW_MS / 60_000);
  const r = await stack.api("GET", `/v1/metrics?window=${minutes}m`, undefined, { timeoutMs: 60_000 });
  const cost = (r.json as { cost?: ApiCost | null }).cost;
  if (r.status !== 200 || !cost) throw new Error(`GET /v1/metrics: ${r.status} ${JSON.stringify(r.json).slice(0, 300)}`);
  const created = cost.workerOperations["POST /v1/jobs"];
  return {
    windowMs: minutes * 60_000,
    runsFinished: cost.runsFinished,
    jobsCreated: bench.jobsCreated,
    createCalls: created?.calls ?? 0,
    rateLimited: bench.rateLimited,
    perRun: cost.perRun,
    byTable: tableRows(cost, cost.runsFinished),
    d1RowsWrittenPerJobCreated: created && bench.jobsCreated ? created.rowsWritten / bench.jobsCreated : null,
    usdPerMillionRuns: cost.usdPerMillionRuns,
    meter: cost.meter,
    prices: { asOf: cost.prices.asOf },
    cost,
  };
}

/** "rows written per run by object and table": one line per object, its tables by rows written, most first. */
export function tableLines(rows: readonly TableRows[]): string[] {
  const objects = [...new Set(rows.map((r) => r.object))];
  return objects.map((object) => {
    const list = rows
      .filter((r) => r.object === object)
      .sort((a, b) => (b.rowsWrittenPerRun ?? -1) - (a.rowsWrittenPerRun ?? -1))
      .map((r) => `${r.table} ${r.rowsWrittenPerRun ?? "-"}`);
    return `    ${object.padEnd(6)} ${list.join(", ") || "-"}`;
  });
}

export function costLines(c: CostFigures): string[] {
  const f = (n: number | null | undefined, digits = 2) => (n === null || n === undefined ? "-" : n.toFixed(digits));
  const p = c.perRun;
  const lines = [
    `  cost (meters)   ${c.runsFinished} runs finished in ${c.windowMs / 60_000} min (warm-up runs included); per run: ${f(p?.sqlRowsWritten)} rows written, ${f(p?.sqlRowsRead)} rows read, ${f(p?.queueMessages)} queue messages, ${f(p?.doRequests)} DO requests, ${f(p?.d1RowsWritten)} D1 rows written`,
    `                  ${f(c.d1RowsWrittenPerJobCreated)} D1 rows written per job created (${c.jobsCreated} created in ${c.createCalls} POST /v1/jobs calls, ${c.rateLimited} refused for the rate limit); $${f(c.usdPerMillionRuns)} per million runs at ${c.prices.asOf} list prices; the meters' own rows apart: ${JSON.stringify(c.meter)}`,
  ];
  if (c.byTable) lines.push("  rows written per run by object and table:", ...tableLines(c.byTable));
  return lines;
}
