/**
 * The shard's cost meter: SQLite rows read and written, requests, queue messages, gate calls
 * and finished runs, per named operation (an RPC method, the alarm, or `settle`, the shared
 * step after every change), kept in `cost_tallies` so that they outlive the object: one row
 * per minute holding every operation's counts, so that a write costs one row however many
 * operations it carries.
 *
 * Rows are read off each statement's cursor (`rowsRead`, `rowsWritten`), which are final only
 * once the cursor is consumed, so cursors are kept and summed at `persist`. The statements the
 * meter runs itself are kept out of every operation's figures and reported as `meter`.
 *
 * It also counts what the runtime does to the object, not to any operation: its starts and
 * how late its alarms came. Those ride on the next tally written, so they cost no row of their
 * own. So do the shard's counters since it was created (counters.ts), on the same row.
 */

import { ALARM_TABLE, writtenTable } from "../cost/written-table";
import { addLags, countLag, lagColumnValues, lagsOfValues, noLags } from "../protocol/alarm-lag";
import type { DurableObjectFigures, OperationCost, ShardCost } from "../protocol/shard-rpc";
import { decodeTotals, encodeTotals, type ShardTotals } from "../protocol/totals";
import { ArmedAlarm } from "./armed-alarm";
import { ShardCounters } from "./counters";

/** The label of statements that run after an RPC's own change: admission, sending, re-arming. */
export const SETTLE = "settle";

/** The alarm's label: its transactions, including those it commits after an await. */
export const ALARM = "alarm";

/** Rows older than the longest window metrics may ask for, and a margin, are dropped. */
const KEEP_MINUTES = 25 * 60;
/**
 * Counts are written at most this often: a write per call would add about two rows to every
 * run. A shard evicted between writes loses what it had not written: the meter undercounts,
 * never overcounts.
 */
const WRITE_EVERY_MS = 10_000;

const MINUTE_MS = 60_000;

/** The counts of an operation, in the order a tally stores them. */
const OPERATION_COUNTS = [
  "calls",
  "rowsRead",
  "rowsWritten",
  "queueMessages",
  "gateRequests",
  "runsFinished",
] as const satisfies ReadonlyArray<keyof OperationCost>;

/**
 * One minute's counts, a `cost_tallies` row (shard schema step 18) as JSON: each operation's
 * counts in OPERATION_COUNTS order, the meter's own rows read and written, the object's
 * starts, and its alarm lags in `lagColumnValues` order.
 */
interface Tally {
  ops: Record<string, number[]>;
  /** Rows written by table (writtenTable), every operation's; absent in a tally written before it was kept. */
  tables?: Record<string, number>;
  meter: [number, number];
  starts: number;
  lags: number[];
}

const emptyTally = (): Tally => ({ ops: {}, meter: [0, 0], starts: 0, lags: lagColumnValues(noLags()) });

// The totals ride on the tally's row: one row written either way (docs/cost.md).
const UPSERT =
  "INSERT INTO cost_tallies (minute, tally, totals) VALUES (?, ?, ?) ON CONFLICT (minute) DO UPDATE SET tally = excluded.tally, totals = excluded.totals";

const zero = (): OperationCost => ({ calls: 0, rowsRead: 0, rowsWritten: 0, queueMessages: 0, gateRequests: 0, runsFinished: 0 });

type Counter = Exclude<keyof OperationCost, "rowsRead" | "rowsWritten">;

export class ShardMeter {
  private label = SETTLE;
  private cursors: Array<{ label: string; table: string | null; cursor: { readonly rowsRead: number; readonly rowsWritten: number } }> = [];
  private counted = new Map<string, OperationCost>();
  /** Rows written by table, not yet written to a tally. */
  private tables = new Map<string, number>();
  /** What the meter's own statements cost, written with the next persist (its own cost is known only after it ran). */
  private own = { rowsRead: 0, rowsWritten: 0 };
  /** Starts not yet written: the one of this object, until its first write. */
  private starts = 0;
  /** Alarm lags not yet written. */
  private lags = noLags();
  private readonly alarm = new ArmedAlarm();
  private prunedMinute = 0;
  private lastWrite = 0;
  /** The tally this object last wrote, kept so that the next write of that minute need not read it back. */
  private written: { minute: number; tally: Tally } | undefined;
  /** The shard's counters since it was created, written with each tally. */
  readonly counters = new ShardCounters();

  constructor(private readonly raw: SqlStorage) {}

  /** The storage the shard's store uses: every statement is charged to the operation running. */
  readonly sql: Pick<SqlStorage, "exec"> = {
    exec: <T extends Record<string, SqlStorageValue>>(query: string, ...bindings: unknown[]) => {
      const cursor = this.raw.exec<T>(query, ...bindings);
      this.cursors.push({ label: this.label, table: writtenTable(query), cursor });
      return cursor;
    },
  };

  /**
   * Runs the synchronous part of `work` as `operation`. A Durable Object interleaves calls only
   * at awaits, so a label set and restored around synchronous code cannot leak into another
   * call's statements; what runs after an await is charged to `settle`.
   */
  during<T>(operation: string, work: () => T): T {
    const before = this.label;
    this.label = operation;
    try {
      return work();
    } finally {
      this.label = before;
    }
  }

  /** The shard object was just constructed: counted with the next write. */
  countStart(): void {
    this.starts++;
    this.counters.started();
  }

  /** The shard's alarm is now set for `at` (null: none). */
  alarmSet(at: number | null, now: number): void {
    this.alarm.set(at, now);
  }

  /** A `setAlarm` call: billed as a row written, charged to the operation running. */
  alarmWritten(): void {
    this.of(this.label).rowsWritten++;
    this.addTable(ALARM_TABLE, 1);
  }

  private addTable(table: string, rows: number): void {
    if (rows > 0) this.tables.set(table, (this.tables.get(table) ?? 0) + rows);
  }

  /**
   * The alarm handler starts: its lag is counted, unless the runtime retries a failed one (a
   * retry waits out a backoff on purpose). `info` is the runtime's, absent when a test calls
   * `alarm()` itself.
   */
  alarmStarted(now: number, info: AlarmInvocationInfo | undefined): void {
    const lag = this.alarm.started(now, info?.scheduledTime);
    if (lag !== null && !info?.isRetry) {
      countLag(this.lags, lag);
      this.counters.alarmLag(lag);
    }
  }

  /** Counts made inside a change of the shard's state, kept apart until it commits (`endChange`); null outside a change. */
  private pending: Array<[Counter, number, string]> | null = null;

  /**
   * A change of the shard's state (its transaction) begins: what it counts, here and in the
   * counters, stands only if it commits, so a run that ended in a transaction that rolled back
   * and then ends again is counted once.
   */
  beginChange(): void {
    this.pending = [];
    this.counters.hold();
  }

  /** The change ended: committed, what it counted is added; rolled back, it is dropped. */
  endChange(committed: boolean): void {
    const pending = this.pending ?? [];
    this.pending = null;
    this.counters.release(committed);
    if (committed) for (const [counter, n, operation] of pending) this.count(counter, n, operation);
  }

  /** Adds to a counter of the operation running now (or `operation`). */
  count(counter: Counter, n = 1, operation = this.label): void {
    if (this.pending) {
      this.pending.push([counter, n, operation]);
      return;
    }
    const c = this.of(operation);
    c[counter] += n;
  }

  /**
   * Adds up what the invocation's statements read and wrote, and writes the tally (one row, the
   * minute of the write) when WRITE_EVERY_MS have passed, or at once when `force`d. Called at
   * the end of every invocation, after its last await, so the write commits with the
   * invocation's last implicit transaction.
   */
  persist(now: number, force = false): void {
    for (const { label, table, cursor } of this.cursors.splice(0)) {
      const c = this.of(label);
      c.rowsRead += cursor.rowsRead;
      c.rowsWritten += cursor.rowsWritten;
      if (table !== null) this.addTable(table, cursor.rowsWritten);
    }
    if (this.counted.size === 0 || (!force && now - this.lastWrite < WRITE_EVERY_MS)) return;
    this.lastWrite = now;
    const minute = Math.floor(now / MINUTE_MS);
    const tally = this.tallyOf(minute);
    for (const [operation, c] of this.counted) {
      const counts = tally.ops[operation] ?? OPERATION_COUNTS.map(() => 0);
      tally.ops[operation] = OPERATION_COUNTS.map((name, i) => (counts[i] ?? 0) + c[name]);
    }
    // Carried from the last write: this one's own cost is carried to the next.
    tally.meter[0] += this.own.rowsRead;
    tally.meter[1] += this.own.rowsWritten;
    tally.starts += this.starts;
    const lags = lagsOfValues(tally.lags);
    addLags(lags, this.lags);
    tally.lags = lagColumnValues(lags);
    const tables = tally.tables ?? {};
    for (const [table, rows] of this.tables) tables[table] = (tables[table] ?? 0) + rows;
    tally.tables = tables;
    this.counted.clear();
    this.tables.clear();
    this.own = { rowsRead: 0, rowsWritten: 0 };
    this.starts = 0;
    this.lags = noLags();
    const totals = encodeTotals(this.counters.toWrite(() => this.storedTotals()));
    this.addOwn(this.raw.exec(UPSERT, minute, JSON.stringify(tally), totals));
    this.written = { minute, tally };
    if (minute > this.prunedMinute) {
      // Once a minute at most: a range delete on the primary key.
      this.addOwn(this.raw.exec("DELETE FROM cost_tallies WHERE minute < ?", minute - KEEP_MINUTES));
      this.prunedMinute = minute;
    }
  }

  /**
   * The counters of the minutes from `since` on (whole minutes), per operation, what is still in
   * memory included; and the object's own figures, summed over every minute.
   */
  window(since: number, now: number): { cost: ShardCost; durableObject: DurableObjectFigures; totals: ShardTotals } {
    this.persist(now, true);
    const cursor = this.raw.exec("SELECT tally FROM cost_tallies WHERE minute >= ?", Math.floor(since / MINUTE_MS));
    const tallies = cursor.toArray().map((r) => JSON.parse(r.tally as string) as Tally);
    this.addOwn(cursor);
    const byOperation: Record<string, OperationCost> = {};
    const byTable: Record<string, number> = {};
    const meter = { rowsRead: 0, rowsWritten: 0 };
    const durableObject: DurableObjectFigures = { starts: 0, alarmLag: noLags() };
    for (const tally of tallies) {
      for (const [operation, counts] of Object.entries(tally.ops)) {
        const into = byOperation[operation] ?? zero();
        for (const [i, name] of OPERATION_COUNTS.entries()) into[name] += counts[i] ?? 0;
        byOperation[operation] = into;
      }
      for (const [table, rows] of Object.entries(tally.tables ?? {})) byTable[table] = (byTable[table] ?? 0) + rows;
      meter.rowsRead += tally.meter[0];
      meter.rowsWritten += tally.meter[1];
      durableObject.starts += tally.starts;
      addLags(durableObject.alarmLag, lagsOfValues(tally.lags));
    }
    return { cost: { byOperation, byTable, meter }, durableObject, totals: this.counters.current(() => this.storedTotals()) };
  }

  /**
   * The totals last written, read once per object: the latest row that has them (a release from
   * before step 19, rolled back to, writes rows without; what it counted is lost, not undone).
   */
  private storedTotals(): ShardTotals | null {
    const cursor = this.raw.exec("SELECT totals FROM cost_tallies WHERE totals IS NOT NULL ORDER BY minute DESC LIMIT 1");
    const row = cursor.toArray()[0];
    this.addOwn(cursor);
    return row ? decodeTotals(row.totals as string) : null;
  }

  /** The tally of `minute` as stored: the one this object wrote last, or read (once after a start, or in a new minute). */
  private tallyOf(minute: number): Tally {
    if (this.written?.minute === minute) return this.written.tally;
    const cursor = this.raw.exec("SELECT tally FROM cost_tallies WHERE minute = ?", minute);
    const row = cursor.toArray()[0];
    this.addOwn(cursor);
    return row ? (JSON.parse(row.tally as string) as Tally) : emptyTally();
  }

  private of(operation: string): OperationCost {
    const c = this.counted.get(operation) ?? zero();
    this.counted.set(operation, c);
    return c;
  }

  private addOwn(cursor: { rowsRead: number; rowsWritten: number }): void {
    this.own.rowsRead += cursor.rowsRead;
    this.own.rowsWritten += cursor.rowsWritten;
  }
}
