/**
 * A tenant gate's cost meter: its SQLite rows read and written, and its alarms set (billed as a
 * row written each), per call (`admit`, `release`, …) and by the table each statement writes, so
 * that `GET /v1/metrics` prices what a tenant's runs cost at its gate beside what they cost at
 * their shards. Kept in the gate's storage like a shard's meter (src/shard/meter.ts): one row a
 * minute holding every call's counts, written at most every 10 seconds, the meter's own rows
 * apart. A gate evicted between writes loses what it had not written: the meter undercounts.
 *
 * Counts not yet written are written by the gate's alarm at the latest (`writeDueAt`), so that an
 * idle gate's eviction loses none: a row and an alarm per idle spell, the meter's own.
 *
 * A call's statements are charged to it from its start to its end; a gate serves calls one at a
 * time except across an await of another object or of D1 (the recount of live messages), where
 * another call's statements may be charged to it: the totals stay right.
 */
import { ALARM_TABLE, writtenTable } from "../cost/written-table";

export interface GateOperationCost {
  calls: number;
  rowsRead: number;
  rowsWritten: number;
}

export interface GateCost {
  byOperation: Record<string, GateOperationCost>;
  byTable: Record<string, number>;
  meter: { rowsRead: number; rowsWritten: number };
}

interface Tally {
  ops: Record<string, [number, number, number]>;
  tables: Record<string, number>;
  meter: [number, number];
}

export const GATE_COST_SCHEMA = "CREATE TABLE IF NOT EXISTS gate_cost (minute INTEGER PRIMARY KEY, tally TEXT NOT NULL) WITHOUT ROWID;";

const MINUTE_MS = 60_000;
const WRITE_EVERY_MS = 10_000;
const KEEP_MINUTES = 25 * 60;

export class GateMeter {
  private label = "gate";
  private cursors: Array<{ label: string; table: string | null; cursor: { readonly rowsRead: number; readonly rowsWritten: number } }> = [];
  private tally: Tally = { ops: {}, tables: {}, meter: [0, 0] };
  private lastWrite = 0;
  private own = { rowsRead: 0, rowsWritten: 0 };

  /** The storage the gate uses: every statement is charged to the call running. */
  readonly sql: SqlStorage;

  constructor(private readonly raw: SqlStorage) {
    this.sql = new Proxy(raw, {
      get: (target, prop) => {
        if (prop !== "exec") return Reflect.get(target, prop);
        return <T extends Record<string, SqlStorageValue>>(query: string, ...bindings: unknown[]) => {
          const cursor = target.exec<T>(query, ...bindings);
          this.cursors.push({ label: this.label, table: writtenTable(query), cursor });
          return cursor;
        };
      },
    });
  }

  /** A call begins: counted, and what runs until the next begins is charged to it (the last call's rows are added up now). */
  begin(operation: string): void {
    this.persist(Date.now());
    this.label = operation;
    this.op(operation)[0]++;
  }

  /** A `setAlarm`: billed as a row written; the meter's own when it is set only to write the counts. */
  alarmWritten(metersOwn: boolean): void {
    if (metersOwn) {
      this.own.rowsWritten++;
      return;
    }
    this.op(this.label)[2]++;
    this.tally.tables[ALARM_TABLE] = (this.tally.tables[ALARM_TABLE] ?? 0) + 1;
  }

  /** When counts not yet written are due to be (null: none): the gate's alarm writes them if no call does first. */
  writeDueAt(): number | null {
    return Object.keys(this.tally.ops).length === 0 && this.cursors.length === 0 ? null : this.lastWrite + WRITE_EVERY_MS;
  }

  /** Adds up the statements' rows (final once their cursors were read) and writes the tally when due, or now when `force`d. */
  persist(now: number, force = false): void {
    for (const { label, table, cursor } of this.cursors.splice(0)) {
      const c = this.op(label);
      c[1] += cursor.rowsRead;
      c[2] += cursor.rowsWritten;
      if (table !== null && cursor.rowsWritten > 0) this.tally.tables[table] = (this.tally.tables[table] ?? 0) + cursor.rowsWritten;
    }
    if (Object.keys(this.tally.ops).length === 0 || (!force && now - this.lastWrite < WRITE_EVERY_MS)) return;
    this.lastWrite = now;
    const minute = Math.floor(now / MINUTE_MS);
    const stored = this.raw.exec("SELECT tally FROM gate_cost WHERE minute = ?", minute).toArray()[0];
    const into: Tally = stored ? (JSON.parse(stored.tally as string) as Tally) : { ops: {}, tables: {}, meter: [0, 0] };
    for (const [op, counts] of Object.entries(this.tally.ops)) {
      const c = into.ops[op] ?? [0, 0, 0];
      into.ops[op] = [c[0] + counts[0], c[1] + counts[1], c[2] + counts[2]];
    }
    for (const [table, rows] of Object.entries(this.tally.tables)) into.tables[table] = (into.tables[table] ?? 0) + rows;
    into.meter = [into.meter[0] + this.own.rowsRead, into.meter[1] + this.own.rowsWritten];
    this.tally = { ops: {}, tables: {}, meter: [0, 0] };
    this.own = { rowsRead: 0, rowsWritten: 0 };
    this.addOwn(this.raw.exec("INSERT OR REPLACE INTO gate_cost (minute, tally) VALUES (?, ?)", minute, JSON.stringify(into)));
    this.addOwn(this.raw.exec("DELETE FROM gate_cost WHERE minute < ?", minute - KEEP_MINUTES));
  }

  /** The counts of the minutes from `since` on, what is in memory included. */
  window(since: number, now: number): GateCost {
    this.persist(now, true);
    const cost: GateCost = { byOperation: {}, byTable: {}, meter: { rowsRead: 0, rowsWritten: 0 } };
    for (const row of this.raw.exec("SELECT tally FROM gate_cost WHERE minute >= ?", Math.floor(since / MINUTE_MS)).toArray()) {
      const t = JSON.parse(row.tally as string) as Tally;
      for (const [op, [calls, rowsRead, rowsWritten]] of Object.entries(t.ops)) {
        const c = cost.byOperation[op] ?? { calls: 0, rowsRead: 0, rowsWritten: 0 };
        cost.byOperation[op] = { calls: c.calls + calls, rowsRead: c.rowsRead + rowsRead, rowsWritten: c.rowsWritten + rowsWritten };
      }
      for (const [table, rows] of Object.entries(t.tables)) cost.byTable[table] = (cost.byTable[table] ?? 0) + rows;
      cost.meter.rowsRead += t.meter[0];
      cost.meter.rowsWritten += t.meter[1];
    }
    return cost;
  }

  private op(operation: string): [number, number, number] {
    const c = this.tally.ops[operation] ?? [0, 0, 0];
    this.tally.ops[operation] = c;
    return c;
  }

  private addOwn(cursor: { rowsRead: number; rowsWritten: number }): void {
    this.own.rowsRead += cursor.rowsRead;
    this.own.rowsWritten += cursor.rowsWritten;
  }
}
