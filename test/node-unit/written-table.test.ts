import { describe, expect, it } from "vitest";
import { writtenTable } from "../../src/cost/written-table";

describe("the table a statement writes (the cost meter's rows by table)", () => {
  it.each([
    ["INSERT INTO runs (id) VALUES (?)", "runs"],
    ["insert or ignore into shard_tenants (shard) values (?)", "shard_tenants"],
    ["  UPDATE runs SET state = ? WHERE id = ?", "runs"],
    ["DELETE FROM permits WHERE expires_at <= ?", "permits"],
    ["REPLACE INTO meta (key, value) VALUES (?, ?)", "meta"],
    ["INSERT OR REPLACE INTO gate_cost (minute, tally) VALUES (?, ?)", "gate_cost"],
    ["WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 3) INSERT INTO t SELECT i FROM n", "t"],
  ])("%s writes %s", (query, table) => {
    expect(writtenTable(query)).toBe(table);
  });

  it.each(["SELECT * FROM runs WHERE id = ?", "SELECT 1 FROM runs WHERE state = 'UPDATE x'", "PRAGMA table_info(runs)"])(
    "%s writes nothing",
    (query) => {
      expect(writtenTable(query)).toBeNull();
    },
  );
});
