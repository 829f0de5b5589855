import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { permitsWithoutRowid, type TenantGate } from "../../src/gate/tenant-gate";

/** A tenant gate's storage: its permits a row each (docs/cost.md), those of a gate made before kept. */
describe("a tenant gate's permits table", () => {
  it("is WITHOUT ROWID, and a gate made with the rowid table keeps its permits when it moves", async () => {
    const gate = env.TENANT_GATE.get(env.TENANT_GATE.idFromName(`gate-storage-${crypto.randomUUID()}`));
    await runInDurableObject(gate, (_g: TenantGate, state) => {
      const sql = state.storage.sql;
      const schema = () => sql.exec("SELECT sql FROM sqlite_master WHERE name = 'permits'").one().sql as string;
      expect(schema()).toMatch(/WITHOUT ROWID/);
      // As a gate of an earlier release left it.
      sql.exec("DROP TABLE permits");
      sql.exec("CREATE TABLE permits (permit TEXT PRIMARY KEY, shard TEXT NOT NULL, expires_at INTEGER NOT NULL)");
      sql.exec("INSERT INTO permits VALUES ('run_a#1', 'shard-1', 123)");
      permitsWithoutRowid(sql);
      expect(schema()).toMatch(/WITHOUT ROWID/);
      expect(sql.exec("SELECT permit, shard, expires_at FROM permits").toArray()).toEqual([
        { permit: "run_a#1", shard: "shard-1", expires_at: 123 },
      ]);
      // A second start changes nothing.
      permitsWithoutRowid(sql);
      expect(sql.exec("SELECT COUNT(*) AS n FROM permits").one().n).toBe(1);
    });
  });
});
