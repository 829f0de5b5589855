// The burst's cost, as the scheduler's own meters counted it: GET /v1/metrics over a window
// that covers the whole bench (calibration, creation, runs, and the bench's own reads of the
// runs API and of the metrics themselves), divided by the runs finished in it.
import type { Stack } from "../test/support/local-stack.ts";

export interface CostFigures {
  windowMs: number;
  runsFinished: number;
  jobsCreated: number;
  perRun: Record<string, number> | null;
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

export async function readCost(stack: Stack, sinceMs: number): Promise<CostFigures> {
  // Whole minutes, one more for the minute the bench started in.
  const minutes = Math.min(Math.ceil((Date.now() - sinceMs) / 60_000) + 1, MAX_WINDOW_MS / 60_000);
  const r = await stack.api("GET", `/v1/metrics?window=${minutes}m`, undefined, { timeoutMs: 60_000 });
  const cost = (r.json as { cost?: ApiCost | null }).cost;
  if (r.status !== 200 || !cost) throw new Error(`GET /v1/metrics: ${r.status} ${JSON.stringify(r.json).slice(0, 300)}`);
  const created = cost.workerOperations["POST /v1/jobs"];
  return {
    windowMs: minutes * 60_000,
    runsFinished: cost.runsFinished,
    jobsCreated: created?.calls ?? 0,
    perRun: cost.perRun,
    d1RowsWrittenPerJobCreated: created?.calls ? created.rowsWritten / created.calls : null,
    usdPerMillionRuns: cost.usdPerMillionRuns,
    meter: cost.meter,
    prices: { asOf: cost.prices.asOf },
    cost,
  };
}

export function costLines(c: CostFigures): string[] {
  const f = (n: number | null | undefined, digits = 2) => (n === null || n === undefined ? "-" : n.toFixed(digits));
  const p = c.perRun;
  return [
    `  cost (meters)   ${c.runsFinished} runs finished in ${c.windowMs / 60_000} min; per run: ${f(p?.sqlRowsWritten)} rows written, ${f(p?.sqlRowsRead)} rows read, ${f(p?.queueMessages)} queue messages, ${f(p?.doRequests)} DO requests, ${f(p?.d1RowsWritten)} D1 rows written`,
    `                  ${f(c.d1RowsWrittenPerJobCreated)} D1 rows written per job created (${c.jobsCreated} created); $${f(c.usdPerMillionRuns)} per million runs at ${c.prices.asOf} list prices; the meters' own rows apart: ${JSON.stringify(c.meter)}`,
  ];
}
