import { z } from "@hono/zod-openapi";

const Counts = z
  .object({
    doRequests: z.number(),
    sqlRowsRead: z.number(),
    sqlRowsWritten: z.number(),
    queueMessages: z.number(),
    d1RowsRead: z.number(),
    d1RowsWritten: z.number(),
  })
  .openapi("BilledCounts");

/** `cost` of GET /v1/metrics: what the window cost, counted where it happened (src/app/cost.ts). */
export const CostSchema = z
  .object({
    runsFinished: z.int().openapi({ description: "Runs that reached a final state in the window." }),
    totals: Counts.openapi({
      description:
        "Durable Object requests (shard calls and alarms, tenant gate calls), shard SQLite rows, queue messages sent, D1 rows; the meters' own rows left out.",
    }),
    perRun: Counts.nullable().openapi({ description: "totals over runsFinished; null when none finished." }),
    usd: z.number().openapi({ description: "totals at list prices (prices), in dollars." }),
    usdPerMillionRuns: z.number().nullable(),
    shardOperations: z
      .record(
        z.string(),
        z.object({
          calls: z.int(),
          rowsRead: z.int(),
          rowsWritten: z.int(),
          queueMessages: z.int(),
          gateRequests: z.int(),
          runsFinished: z.int(),
        }),
      )
      .openapi({ description: "Per shard RPC method, `alarm`, and `settle` (the step after every change that sends and re-arms)." }),
    shardTables: z.record(z.string(), z.int()).openapi({
      description: "Shard SQLite rows written by the table each statement writes (its index entries with it); `(setAlarm)`: alarms set.",
    }),
    gateOperations: z
      .record(z.string(), z.object({ calls: z.int(), rowsRead: z.int(), rowsWritten: z.int() }))
      .openapi({ description: "Tenant gates' SQLite rows per gate call (admit, release, renew, …) and their `alarm`." }),
    gateTables: z
      .record(z.string(), z.int())
      .openapi({ description: "Tenant gates' SQLite rows written by table; `(setAlarm)`: alarms set." }),
    workerOperations: z
      .record(z.string(), z.object({ calls: z.int(), rowsRead: z.int(), rowsWritten: z.int(), gateRequests: z.int() }))
      .openapi({ description: "D1 rows and tenant gate calls per API route, queue consumer and sweep." }),
    meter: z
      .object({ sqlRowsRead: z.int(), sqlRowsWritten: z.int(), d1RowsRead: z.int(), d1RowsWritten: z.int() })
      .openapi({ description: "Rows the meters' own bookkeeping read and wrote." }),
    prices: z.object({
      asOf: z.string(),
      pages: z.array(z.string()),
      usdPerMillion: z.record(z.string(), z.number()),
      queueOperationsPerMessage: z.number(),
    }),
  })
  .openapi("Cost");
