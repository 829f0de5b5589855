import type { WorkerCost } from "../catalog/cost";
import { tenantsInUse } from "../catalog/shards";
import { PRICES } from "../cost/prices";
import { type BilledCounts, perRun, usdOf, usdPerMillionRuns } from "../cost/usd";
import type { GateCost, GateOperationCost } from "../gate/gate-meter";
import type { OperationCost, ShardCost } from "../protocol/shard-rpc";
import { gateStub } from "../stubs";

/**
 * The scheduler's cost over a window: the shards' meters and the Worker's, summed per
 * operation, priced at the one price table. The meters' own rows are shown apart and left out
 * of the price: they are what watching costs, not what scheduling costs.
 */
export function schedulerCost(shards: ShardCost[], worker: WorkerCost, gates: GateCost[] = []) {
  const byOperation: Record<string, OperationCost> = {};
  const shardTables: Record<string, number> = {};
  const meter = { sqlRowsRead: 0, sqlRowsWritten: 0, d1RowsRead: worker.meter.rowsRead, d1RowsWritten: worker.meter.rowsWritten };
  for (const shard of shards) {
    for (const [op, c] of Object.entries(shard.byOperation)) {
      const into = byOperation[op] ?? { calls: 0, rowsRead: 0, rowsWritten: 0, queueMessages: 0, gateRequests: 0, runsFinished: 0 };
      byOperation[op] = into;
      into.calls += c.calls;
      into.rowsRead += c.rowsRead;
      into.rowsWritten += c.rowsWritten;
      into.queueMessages += c.queueMessages;
      into.gateRequests += c.gateRequests;
      into.runsFinished += c.runsFinished;
    }
    for (const [table, rows] of Object.entries(shard.byTable ?? {})) shardTables[table] = (shardTables[table] ?? 0) + rows;
    meter.sqlRowsRead += shard.meter.rowsRead;
    meter.sqlRowsWritten += shard.meter.rowsWritten;
  }
  const gateOperations: Record<string, GateOperationCost> = {};
  const gateTables: Record<string, number> = {};
  for (const gate of gates) {
    for (const [op, c] of Object.entries(gate.byOperation)) {
      const into = gateOperations[op] ?? { calls: 0, rowsRead: 0, rowsWritten: 0 };
      gateOperations[op] = {
        calls: into.calls + c.calls,
        rowsRead: into.rowsRead + c.rowsRead,
        rowsWritten: into.rowsWritten + c.rowsWritten,
      };
    }
    for (const [table, rows] of Object.entries(gate.byTable)) gateTables[table] = (gateTables[table] ?? 0) + rows;
    meter.sqlRowsRead += gate.meter.rowsRead;
    meter.sqlRowsWritten += gate.meter.rowsWritten;
  }
  const gateOps = Object.values(gateOperations);
  const shardOps = Object.values(byOperation);
  const workerOps = Object.values(worker.byOperation);
  const sum = <T>(xs: T[], pick: (x: T) => number) => xs.reduce((n, x) => n + pick(x), 0);
  const totals: BilledCounts = {
    doRequests: sum(shardOps, (c) => c.calls + c.gateRequests) + sum(workerOps, (c) => c.gateRequests),
    sqlRowsRead: sum(shardOps, (c) => c.rowsRead) + sum(gateOps, (c) => c.rowsRead),
    sqlRowsWritten: sum(shardOps, (c) => c.rowsWritten) + sum(gateOps, (c) => c.rowsWritten),
    queueMessages: sum(shardOps, (c) => c.queueMessages),
    d1RowsRead: sum(workerOps, (c) => c.rowsRead),
    d1RowsWritten: sum(workerOps, (c) => c.rowsWritten),
  };
  const runsFinished = sum(shardOps, (c) => c.runsFinished);
  return {
    runsFinished,
    totals,
    perRun: perRun(totals, runsFinished),
    usd: usdOf(totals, PRICES),
    usdPerMillionRuns: usdPerMillionRuns(totals, runsFinished, PRICES),
    shardOperations: byOperation,
    shardTables,
    gateOperations,
    gateTables,
    workerOperations: worker.byOperation,
    meter,
    prices: { ...PRICES, pages: [...PRICES.pages] },
  };
}

/**
 * The tenant gates' meters over the window: the gates of the tenants that hold or held jobs or
 * messages (every gate that counts runs); a gate that does not answer is left out (undercounted).
 */
export async function gateCosts(env: Env, windowMs: number): Promise<GateCost[]> {
  const tenants = await tenantsInUse(env.DB);
  const answers = await Promise.allSettled(tenants.map((t) => gateStub(env, t).cost(windowMs)));
  return answers.flatMap((a) => (a.status === "fulfilled" ? [a.value] : []));
}
