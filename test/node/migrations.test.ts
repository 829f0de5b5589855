import { readdirSync, readFileSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { describe, expect, it } from "vitest";

/**
 * D1 is SQLite with foreign keys enforced. The workerd tests apply the migrations to an empty
 * catalog; this applies each one to a catalog that already holds data, as an upgrade does.
 */
const dir = new URL("../../migrations/", import.meta.url);
const migrations = readdirSync(dir)
  .filter((f) => f.endsWith(".sql"))
  .sort();
const apply = (db: DatabaseSync, file: string) => db.exec(readFileSync(new URL(file, dir), "utf8"));

function catalogWithJobs(): DatabaseSync {
  const db = new DatabaseSync(":memory:");
  db.exec("PRAGMA foreign_keys = ON");
  apply(db, migrations[0]!);
  const insert = db.prepare(
    "INSERT INTO jobs (id, name, shard, version, spec, paused, created_at, updated_at) VALUES (?, ?, ?, 1, '{}', 0, 0, 0)",
  );
  insert.run("job_000000000aaaaaaaaaa", "before", "shard-1");
  insert.run("job_000000000bbbbbbbbbb", null, "shard-2");
  return db;
}

describe("D1 migrations on a catalog with data", () => {
  it("every later migration applies, and existing jobs belong to the default tenant", () => {
    const db = catalogWithJobs();
    for (const file of migrations.slice(1)) expect(() => apply(db, file), file).not.toThrow();
    expect(db.prepare("SELECT id, tenant_id FROM jobs ORDER BY id").all()).toEqual([
      { id: "job_000000000aaaaaaaaaa", tenant_id: "default" },
      { id: "job_000000000bbbbbbbbbb", tenant_id: "default" },
    ]);
    expect(db.prepare("SELECT id FROM tenants").all()).toEqual([{ id: "default" }]);
    expect(db.prepare("PRAGMA foreign_key_check").all()).toEqual([]);
    // The jobs keyed by their id itself, the indexes made again.
    expect(db.prepare("SELECT sql FROM sqlite_master WHERE name = 'jobs'").get()).toMatchObject({
      sql: expect.stringContaining("WITHOUT ROWID"),
    });
    expect(db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs' ORDER BY name").all()).toEqual([
      { name: "jobs_by_shard" },
      { name: "jobs_by_tenant" },
      { name: "jobs_by_updated" },
    ]);
  });
});
