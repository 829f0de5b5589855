/** One step of the shard's schema (migrations.ts lists them): its number, what it is for, and its SQL. */
export interface ShardMigration {
  version: number;
  name: string;
  sql: string;
}
