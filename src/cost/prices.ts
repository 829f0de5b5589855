/**
 * Cloudflare's list prices (Workers Paid, beyond the included allowances), the only place the
 * code keeps them. Allowances are left out on purpose: a cost per run is a marginal cost, and
 * what is free depends on everything else on the account.
 *
 * Read on 2026-12 (the `search` corpus of stored pages):
 * - developers.cloudflare.com/durable-objects/platform/pricing/: requests $0.15 per million
 *   (RPC method calls and alarm invocations each count as one); SQLite storage rows read $0.001
 *   and rows written $1.00 per million (the same as D1; not shown in the stored excerpt,
 *   taken from the team's brief);
 * - developers.cloudflare.com/d1/platform/pricing/: rows read $0.001, rows written $1.00 per
 *   million (each index entry written is a row written);
 * - developers.cloudflare.com/queues/platform/pricing/: $0.40 per million operations, and a
 *   message of up to 64 KB delivered once is 3 operations (write, read, delete).
 */
export const PRICES = {
  asOf: "2026-12",
  pages: [
    "https://developers.cloudflare.com/durable-objects/platform/pricing/",
    "https://developers.cloudflare.com/d1/platform/pricing/",
    "https://developers.cloudflare.com/queues/platform/pricing/",
  ],
  usdPerMillion: {
    doRequests: 0.15,
    sqlRowsRead: 0.001,
    sqlRowsWritten: 1.0,
    d1RowsRead: 0.001,
    d1RowsWritten: 1.0,
    queueOperations: 0.4,
  },
  queueOperationsPerMessage: 3,
} as const;

export type Prices = typeof PRICES;
