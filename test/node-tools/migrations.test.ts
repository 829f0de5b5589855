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

/** A catalog as the release before migration `upgrade` left it, with a tenant of its own (`ten_a…`). */
function catalogUpTo(upgrade: number): DatabaseSync {
  const db = new DatabaseSync(":memory:");
  db.exec("PRAGMA foreign_keys = ON");
  for (const file of migrations.slice(0, upgrade)) apply(db, file);
  db.exec("INSERT INTO tenants (id, name, created_at) VALUES ('ten_aaaaaaaaaaaaaaaaaaaa', 'a', 0)");
  return db;
}

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
    // Since 0010 a creation enters jobs_by_tenant only, a QStash schedule's also the partial
    // jobs_qstash_schedules (0021); the sweep's indexes are gone (docs/cost.md).
    expect(db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs' ORDER BY name").all()).toEqual([
      { name: "jobs_by_tenant" },
      { name: "jobs_changed" },
      { name: "jobs_qstash_schedules" },
    ]);
  });
});

/** The first id a job created at `ms` can have, as newJobId (src/model/ids.ts) makes ids. */
const firstIdAt = (ms: number) => `job_${ms.toString(36).padStart(9, "0")}`;

describe("0010: two catalog rows per job created", () => {
  const upgrade = migrations.indexOf("0010_catalog_two_rows.sql");
  const changesAt = Date.UTC(2026, 5, 1, 12, 0, 0, 123);

  /** A catalog as the release before 0010 left it: jobs of two tenants, some changed, a pass under way. */
  function catalogBefore(): DatabaseSync {
    const db = catalogUpTo(upgrade);
    const insert = db.prepare(
      `INSERT INTO jobs (id, tenant_id, name, shard, version, spec, paused, created_at, updated_at)
       VALUES (?, ?, NULL, ?, ?, '{}', 0, ?, ?)`,
    );
    insert.run("job_000000001aaaaaaaaaa", "default", "shard-1", 1, 1, 1);
    insert.run("job_000000002aaaaaaaaaa", "default", "shard-1", 3, 2, changesAt - 5);
    insert.run("job_000000003aaaaaaaaaa", "ten_aaaaaaaaaaaaaaaaaaaa", "shard-1", 1, 3, 3);
    insert.run("job_000000004aaaaaaaaaa", "ten_aaaaaaaaaaaaaaaaaaaa", "shard-2", 2, 4, changesAt + 5);
    db.prepare(
      "UPDATE sweep_state SET changes_at = ?, changes_id = 'job_000000002aaaaaaaaaa', pass_shard = 'shard-1', pass_after = ?, pass_started_at = 7, passes_completed = 4",
    ).run(changesAt, "job_000000001aaaaaaaaaa");
    return db;
  }

  it("keeps every job, indexes the changed ones in jobs_changed and registers each tenant's shards", () => {
    const db = catalogBefore();
    apply(db, migrations[upgrade]!);
    expect(db.prepare("SELECT COUNT(*) AS n FROM jobs").get()).toEqual({ n: 4 });
    // The jobs a change made version > 1, in the feed's order, through the index itself.
    expect(db.prepare("SELECT id FROM jobs INDEXED BY jobs_changed WHERE version > 1 ORDER BY updated_at, id").all()).toEqual([
      { id: "job_000000002aaaaaaaaaa" },
      { id: "job_000000004aaaaaaaaaa" },
    ]);
    expect(db.prepare("SELECT shard, tenant_id FROM shard_tenants ORDER BY shard, tenant_id").all()).toEqual([
      { shard: "shard-1", tenant_id: "default" },
      { shard: "shard-1", tenant_id: "ten_aaaaaaaaaaaaaaaaaaaa" },
      { shard: "shard-2", tenant_id: "ten_aaaaaaaaaaaaaaaaaaaa" },
    ]);
  });

  it("starts the feed of new jobs where the old feed stood, keeps its cursor over changes, and starts a new pass", () => {
    const db = catalogBefore();
    apply(db, migrations[upgrade]!);
    const state = db.prepare("SELECT * FROM sweep_state").get() as Record<string, unknown>;
    expect(state).toMatchObject({
      created_after: firstIdAt(changesAt),
      changes_at: changesAt,
      changes_id: "job_000000002aaaaaaaaaa",
      pass_shard: "",
      pass_after: "",
      pass_started_at: null,
      passes_completed: 4,
    });
    // Every job created at the old cursor's instant or later sorts after the new one; earlier ones before.
    const created = state.created_after as string;
    expect(`${firstIdAt(changesAt)}0000000000` > created).toBe(true);
    expect(`${firstIdAt(changesAt - 1)}zzzzzzzzzz` < created).toBe(true);
  });

  it("an empty feed's cursor at 0 becomes the smallest id", () => {
    const db = new DatabaseSync(":memory:");
    for (const file of migrations.slice(0, upgrade)) apply(db, file);
    db.exec("UPDATE sweep_state SET changes_at = 0");
    apply(db, migrations[upgrade]!);
    expect(db.prepare("SELECT created_after FROM sweep_state").get()).toEqual({ created_after: "job_000000000" });
  });

  it("registers a pair at a tenant's first job on a shard, once", () => {
    const db = catalogBefore();
    apply(db, migrations[upgrade]!);
    const insert = db.prepare(
      "INSERT INTO jobs (id, tenant_id, shard, version, spec, created_at, updated_at) VALUES (?, 'default', ?, 1, '{}', 9, 9)",
    );
    expect(insert.run("job_000000009aaaaaaaaaa", "shard-3").changes).toBe(1);
    expect(insert.run("job_000000009bbbbbbbbbb", "shard-3").changes).toBe(1);
    expect(insert.run("job_000000009cccccccccc", "shard-1").changes).toBe(1);
    expect(db.prepare("SELECT shard FROM shard_tenants WHERE tenant_id = 'default' ORDER BY shard").all()).toEqual([
      { shard: "shard-1" },
      { shard: "shard-3" },
    ]);
  });
});

describe("0017: a key records the key that made it", () => {
  const upgrade = migrations.indexOf("0017_key_maker.sql");

  /** A catalog as the release before 0017 left it: a tenant with two keys. */
  function catalogBefore(): DatabaseSync {
    const db = catalogUpTo(upgrade);
    const insert = db.prepare(
      "INSERT INTO api_keys (id, tenant_id, hash, prefix, created_at) VALUES (?, 'ten_aaaaaaaaaaaaaaaaaaaa', ?, 'ek_', 0)",
    );
    insert.run("key_aaaaaaaaaaaaaaaaaaaa", "h1");
    insert.run("key_bbbbbbbbbbbbbbbbbbbb", "h2");
    return db;
  }

  it("keys made before it have no maker; a new key names a key that exists, or none", () => {
    const db = catalogBefore();
    apply(db, migrations[upgrade]!);
    expect(db.prepare("SELECT id, created_by FROM api_keys ORDER BY id").all()).toEqual([
      { id: "key_aaaaaaaaaaaaaaaaaaaa", created_by: null },
      { id: "key_bbbbbbbbbbbbbbbbbbbb", created_by: null },
    ]);
    const insert = db.prepare(
      "INSERT INTO api_keys (id, tenant_id, hash, prefix, created_at, created_by) VALUES (?, 'ten_aaaaaaaaaaaaaaaaaaaa', ?, 'ek_', 1, ?)",
    );
    expect(insert.run("key_cccccccccccccccccccc", "h3", "key_aaaaaaaaaaaaaaaaaaaa").changes).toBe(1);
    expect(() => insert.run("key_dddddddddddddddddddd", "h4", "key_nonexistentnonexist")).toThrow(/FOREIGN KEY/);
    expect(db.prepare("PRAGMA foreign_key_check").all()).toEqual([]);
  });

  it("the walk from a key to the keys it made seeks an index", () => {
    const db = catalogBefore();
    apply(db, migrations[upgrade]!);
    const plan = db.prepare("EXPLAIN QUERY PLAN SELECT id FROM api_keys WHERE created_by = ? AND tenant_id = ?").all("k", "t");
    expect(JSON.stringify(plan)).toContain("api_keys_by_maker");
  });
});

describe("0018: a tenant's limit of live messages", () => {
  const upgrade = migrations.indexOf("0018_live_messages.sql");

  it("tenants from before get the default a new tenant gets; the default tenant stays without limits", () => {
    const db = catalogUpTo(upgrade);
    apply(db, migrations[upgrade]!);
    expect(db.prepare("SELECT id, max_live_messages FROM tenants ORDER BY id").all()).toEqual([
      { id: "default", max_live_messages: null },
      { id: "ten_aaaaaaaaaaaaaaaaaaaa", max_live_messages: 10_000 },
    ]);
  });
});

describe("0022: leases of room under maxJobs", () => {
  const upgrade = migrations.indexOf("0022_job_leases.sql");

  it("tenants from before are at epoch 0 (test/workerd/job-quota.test.ts has what the epoch does)", () => {
    const db = catalogUpTo(upgrade);
    apply(db, migrations[upgrade]!);
    expect(db.prepare("SELECT id, jobs_epoch FROM tenants ORDER BY id").all()).toEqual([
      { id: "default", jobs_epoch: 0 },
      { id: "ten_aaaaaaaaaaaaaaaaaaaa", jobs_epoch: 0 },
    ]);
  });
});
