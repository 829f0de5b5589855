import type { WorkerCost } from "../catalog/cost";
import { PRICES } from "../cost/prices";
import { type BilledCounts, perRun, usdOf, usdPerMillionRuns } from "../cost/usd";
import type { OperationCost, ShardCost } from "../protocol/shard-rpc";

/**
 * The scheduler's cost over a window: the shards' meters and the Worker's, summed per
 * operation, priced at the one price table. The meters' own rows are shown apart and left out
 * of the price: they are what watching costs, not what scheduling costs.
 */
export function schedulerCost(shards: ShardCost[], worker: WorkerCost) {
  const byOperation: Record<string, OperationCost> = {};
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
    meter.sqlRowsRead += shard.meter.rowsRead;
    meter.sqlRowsWritten += shard.meter.rowsWritten;
  }
  const shardOps = Object.values(byOperation);
  const workerOps = Object.values(worker.byOperation);
  const sum = <T>(xs: T[], pick: (x: T) => number) => xs.reduce((n, x) => n + pick(x), 0);
  const totals: BilledCounts = {
    doRequests: sum(shardOps, (c) => c.calls + c.gateRequests) + sum(workerOps, (c) => c.gateRequests),
    sqlRowsRead: sum(shardOps, (c) => c.rowsRead),
    sqlRowsWritten: sum(shardOps, (c) => c.rowsWritten),
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
    workerOperations: worker.byOperation,
    meter,
    prices: { ...PRICES, pages: [...PRICES.pages] },
  };
}
