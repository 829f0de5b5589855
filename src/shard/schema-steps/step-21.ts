import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 21,
  name: "a tenant's choice of signature schemes",
  // Whether its requests also carry the first scheme, Edgecron-Signature, beside
  // Edgecron-Signature-V2 (src/verify.ts). NULL (a tenant stored before this step, or settings
  // from an earlier release) means on: its targets may verify only the first scheme.
  sql: `
ALTER TABLE tenants ADD COLUMN legacy_signature INTEGER;`,
};
