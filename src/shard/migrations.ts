import type { ShardMigration } from "./schema-steps/shard-migration";
import { step as step01 } from "./schema-steps/step-01";
import { step as step02 } from "./schema-steps/step-02";
import { step as step03 } from "./schema-steps/step-03";
import { step as step04 } from "./schema-steps/step-04";
import { step as step05 } from "./schema-steps/step-05";
import { step as step06 } from "./schema-steps/step-06";
import { step as step07 } from "./schema-steps/step-07";
import { step as step08 } from "./schema-steps/step-08";
import { step as step09 } from "./schema-steps/step-09";
import { step as step10 } from "./schema-steps/step-10";
import { step as step11 } from "./schema-steps/step-11";
import { step as step12 } from "./schema-steps/step-12";
import { step as step13 } from "./schema-steps/step-13";
import { step as step14 } from "./schema-steps/step-14";
import { step as step15 } from "./schema-steps/step-15";
import { step as step16 } from "./schema-steps/step-16";
import { step as step17 } from "./schema-steps/step-17";
import { step as step18 } from "./schema-steps/step-18";
import { step as step19 } from "./schema-steps/step-19";
import { step as step20 } from "./schema-steps/step-20";
import { step as step21 } from "./schema-steps/step-21";
import { step as step22 } from "./schema-steps/step-22";
import { step as step23 } from "./schema-steps/step-23";

/**
 * The shard's schema as numbered, forward-only steps, the way `migrations/` is for D1 and
 * graphile-worker's `sql/` is for Postgres. Each step is the SQL one release added, written
 * out as it was (never derived from today's constants: a later change to the run states must
 * not rewrite what an old step did), and never edited once released. A fresh shard runs every
 * step; an older one runs the steps it lacks. The version lives in the shard's `meta` table.
 * Each step is a file of its own in `schema-steps/`, named for its number; a new one is added
 * there and to the list below.
 */

export const SHARD_MIGRATIONS: readonly ShardMigration[] = [
  step01,
  step02,
  step03,
  step04,
  step05,
  step06,
  step07,
  step08,
  step09,
  step10,
  step11,
  step12,
  step13,
  step14,
  step15,
  step16,
  step17,
  step18,
  step19,
  step20,
  step21,
  step22,
  step23,
];

export const SHARD_SCHEMA_VERSION = SHARD_MIGRATIONS[SHARD_MIGRATIONS.length - 1]!.version;

/**
 * The shard's storage was upgraded by a release newer than this code (a rollback past a step).
 * Steps are one way (step 17 moved recurring jobs' next fires onto their runs, which older code
 * never reads), so code behind its storage would quietly stop firing jobs rather than fail:
 * the shard refuses to run instead, until the newer release is back.
 */
export class ShardSchemaTooNew extends Error {
  constructor(
    readonly stored: number,
    readonly known: number,
  ) {
    super(
      `shard storage is at schema version ${stored}, newer than this code's last step ${known} (a rollback past a migration?): ` +
        "the shard refuses to run until a release with that step is deployed",
    );
    this.name = "ShardSchemaTooNew";
  }
}

/**
 * Brings the shard's storage to the latest version, applying each missing step once. The
 * caller runs this inside one transaction (the Durable Object's constructor does), so an
 * interrupted upgrade leaves nothing half done and the version moves with the steps. Storage
 * newer than the code throws `ShardSchemaTooNew`, before anything is written.
 */
export function migrateShard(sql: SqlStorage): { from: number; to: number } {
  const from = schemaVersion(sql);
  if (from > SHARD_SCHEMA_VERSION) throw new ShardSchemaTooNew(from, SHARD_SCHEMA_VERSION);
  for (const step of SHARD_MIGRATIONS) {
    if (step.version <= from) continue;
    sql.exec(step.sql);
    sql.exec(
      "INSERT INTO meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
      String(step.version),
    );
  }
  return { from, to: SHARD_SCHEMA_VERSION };
}

/**
 * The version the shard's storage is at. Shards created before versions were recorded have
 * none: their schema says which release made them (only the tenants release added
 * `jobs.tenant_id`), and from then on the recorded version decides.
 */
function schemaVersion(sql: SqlStorage): number {
  const hasTable = (name: string) => sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", name).toArray().length > 0;
  if (!hasTable("meta")) return 0;
  const recorded = sql.exec("SELECT value FROM meta WHERE key = 'schema_version'").toArray()[0]?.value;
  if (recorded !== undefined) return Number(recorded);
  if (!hasTable("jobs")) return 0;
  return sql.exec("SELECT 1 FROM pragma_table_info('jobs') WHERE name = 'tenant_id'").toArray().length > 0 ? 2 : 1;
}
