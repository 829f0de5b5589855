import { runKeyRange } from "../model/ids";
import type { Dispatch } from "../protocol/queue-messages";

/**
 * Leases: when the shard next looks at a dispatched run. A run's attempt begins in the
 * transaction that dispatches it, and its lease with it (`lease_until` on the run's row: the
 * one deadline of a dispatched, executing or accepted attempt; docs/architecture.md, invariant
 * 5). This module is how the alarm finds the leases that end: the runs one change leased are
 * listed, by the second their lease ends in, in one row of `leases` each, instead of an entry
 * per run in `runs_due` (an index entry is a row written: docs/cost.md). When a row comes due
 * the ledger looks at each of its runs: one with its outcome recorded is passed over; one whose
 * lease was moved on (a 202, a heartbeat) is listed again for then; one whose lease ended with
 * no outcome is sent again, or timed out.
 */

/** Leases that end within the same second share their row: a change's runs of jobs with other timeouts are a few rows, not one each. */
const BUCKET_MS = 1_000;

/**
 * A lease that ended with no outcome: its dispatch was lost (a crash between commit and send, a
 * Queue that dropped it) or its consumer died. It goes out again under the same fence, this many
 * times at most, each wait doubling from the first lease's delivery allowance, up to
 * MAX_WAIT_FACTOR of them; then the attempt times out, like any attempt whose lease ran out.
 * The growth is small on purpose: with the same fence a slow queue cannot livelock whatever the
 * wait, so the wait only bounds what resends cost, and MAX_REDISPATCHES bounds that already; a
 * longer wait would only delay a run whose copies were lost (a consumer that lost its
 * connection to the queue for a while: every copy sent meanwhile is gone).
 * The same fence, because a dispatch the Queue delays past its lease must still count when it
 * comes: with a new fence each time, a queue slower than the lease would make every outcome
 * stale and nothing would ever be recorded (a livelock).
 */
export const MAX_REDISPATCHES = 5;
const MAX_WAIT_FACTOR = 4;

/**
 * How many times the dispatch Queue delivers one message at most: its first delivery and
 * `max_retries = 5` (runner/wrangler.toml), after which it dead-letters it. A delivery calls
 * the target of each dispatch it carries at most once.
 */
export const QUEUE_DELIVERIES = 6;

/**
 * Target calls one attempt can make at most, when every copy is lost after its call (a
 * consumer that dies before it reports, every time): the first dispatch and MAX_REDISPATCHES
 * copies, lease resends and dead-letter resends counted together per attempt (ledger.ts,
 * `resendOrEnd`), each delivered QUEUE_DELIVERIES times (docs/guarantees.md).
 */
export const MAX_CALLS_PER_ATTEMPT = (1 + MAX_REDISPATCHES) * QUEUE_DELIVERIES;

/** How long a dispatch sent for the `redispatches`-th time may take to reach a consumer: doubling, capped. */
export function deliveryAllowance(claimTimeoutMs: number, redispatches: number): number {
  return claimTimeoutMs * Math.min(2 ** redispatches, MAX_WAIT_FACTOR);
}

/**
 * Runs one lease row lists, at most. A row is read, parsed and rewritten whole, so its size is
 * what one look at it costs: 200 entries of `["<run id>", fence]` are about 12 KB, far under a
 * row's 2 MB, and FIRE_CHUNK (200) runs, a chunk of a burst, still share one row. A change that
 * leases more in one second (catch_up fires, a mass resend) writes more rows, and a merge that
 * would pass this starts a row of its own.
 */
export const LEASE_ROW_RUNS = 200;

/**
 * Leases one alarm looks at, at most: each is a read and, for a lost dispatch, a resend (a run
 * written, an order made and sent), so a backlog of ended leases (a mass dispatch loss) drains
 * this many a tick, the alarm re-armed for now until it has, instead of one transaction that
 * runs out of CPU or memory, fails, and fails again on every retry.
 */
export const LEASE_RUNS_PER_TICK = 2_000;

/** A lease row: when it comes due, and the runs (with the fence each was leased under) it lists. */
export interface LeaseRow {
  dueAt: number;
  firstRun: string;
  runs: Dispatch[];
}

/** A due row's part one tick looks at (`take`), and what is left of it for the next (`rest`). */
export interface LeaseSlice {
  row: LeaseRow;
  take: Dispatch[];
  rest: Dispatch[];
}

/** One second's leases as rows of LEASE_ROW_RUNS at most, in order. */
export function leaseRowsOf(runs: readonly Dispatch[], max = LEASE_ROW_RUNS): Dispatch[][] {
  const rows: Dispatch[][] = [];
  for (let i = 0; i < runs.length; i += max) rows.push(runs.slice(i, i + max));
  return rows;
}

/**
 * What one tick looks at of the due rows, earliest first: whole rows while they fit in
 * `budget` runs, then the head of the next (a row written before rows had a cap may hold
 * more than any tick may take), and nothing after.
 */
export function sliceDue(rows: Iterable<LeaseRow>, budget = LEASE_RUNS_PER_TICK): LeaseSlice[] {
  const slices: LeaseSlice[] = [];
  let left = budget;
  for (const row of rows) {
    if (left <= 0) break;
    slices.push({ row, take: row.runs.slice(0, left), rest: row.runs.slice(left) });
    left -= Math.min(left, row.runs.length);
  }
  return slices;
}

export class Leases {
  /** Leases taken by the change under way, by the second they end in: written when it commits (`write`). */
  #pending = new Map<number, Dispatch[]>();
  /**
   * False once a read found no row, until the next write (a write that rolled back leaves it
   * set, which costs a statement, never a miss): the alarm asks for the earliest after every call.
   */
  private mayHoldAny = true;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** The run's lease, taken under `fence`, ends at `until`. */
  lease(runId: string, fence: number, until: number): void {
    const bucket = Math.ceil(until / BUCKET_MS) * BUCKET_MS;
    const list = this.#pending.get(bucket);
    if (list) list.push({ runId, fence });
    else this.#pending.set(bucket, [{ runId, fence }]);
  }

  /** At the end of a change, inside its transaction: rows of at most LEASE_ROW_RUNS per second its leases end in. */
  write(): void {
    for (const [dueAt, runs] of this.#pending) {
      this.mayHoldAny = true;
      for (const row of leaseRowsOf(runs)) this.writeRow(dueAt, row);
    }
    this.#pending.clear();
  }

  /**
   * The same run can lead two changes' rows in one second (leased, then sent again): one row,
   * both lists, while they fit in LEASE_ROW_RUNS; else the second list takes a key of its own
   * (the first run's id and a suffix: the key is only a name, never read as a run's).
   */
  private writeRow(dueAt: number, runs: Dispatch[]): void {
    const entries = JSON.stringify(runs.map((r) => [r.runId, r.fence]));
    for (let n = 0; ; n++) {
      const key = n === 0 ? runs[0]!.runId : `${runs[0]!.runId}#${n}`;
      const written = this.sql
        .exec(
          `INSERT INTO leases (due_at, first_run, runs) VALUES (?, ?, ?) ON CONFLICT (due_at, first_run) DO UPDATE SET runs =
             (SELECT json_group_array(json(value)) FROM (SELECT value FROM json_each(leases.runs) UNION ALL SELECT value FROM json_each(excluded.runs)))
           WHERE json_array_length(leases.runs) + json_array_length(excluded.runs) <= ?
           RETURNING 1`,
          dueAt,
          key,
          entries,
          LEASE_ROW_RUNS,
        )
        .toArray();
      if (written.length > 0) return;
    }
  }

  /** A change rolled back: the leases it took were never written. */
  forget(): void {
    this.#pending.clear();
  }

  /** The part of the due rows one tick looks at: LEASE_RUNS_PER_TICK runs at most, earliest first (`sliceDue`). */
  due(now: number, budget = LEASE_RUNS_PER_TICK): LeaseSlice[] {
    // Read row by row, and no further than the budget: a row past it is not parsed.
    const cursor = this.sql.exec("SELECT * FROM leases WHERE due_at <= ? ORDER BY due_at", now);
    return sliceDue(
      (function* () {
        for (const r of cursor) yield toLeaseRow(r);
      })(),
      budget,
    );
  }

  /** A slice was looked at: its row goes, or keeps the runs the tick left (for the next tick, due still). */
  looked(slice: LeaseSlice): void {
    const { dueAt, firstRun } = slice.row;
    if (slice.rest.length === 0) this.sql.exec("DELETE FROM leases WHERE due_at = ? AND first_run = ?", dueAt, firstRun);
    else
      this.sql.exec(
        "UPDATE leases SET runs = ? WHERE due_at = ? AND first_run = ?",
        JSON.stringify(slice.rest.map((r) => [r.runId, r.fence])),
        dueAt,
        firstRun,
      );
  }

  earliest(): number | null {
    if (this.#pending.size > 0) return Math.min(...this.#pending.keys());
    if (!this.mayHoldAny) return null;
    const t = this.sql.exec("SELECT MIN(due_at) AS t FROM leases").one().t as number | null;
    this.mayHoldAny = t !== null;
    return t;
  }

  /**
   * The job's runs among the leases (a PATCH that sets an overlap policy looks for them): every
   * row is read, which is work in hand, never history, since a row goes when its leases end.
   */
  runsOf(jobId: string): string[] {
    if (!this.mayHoldAny) return [];
    const [from, to] = runKeyRange(jobId);
    return this.sql
      .exec("SELECT runs FROM leases")
      .toArray()
      .flatMap((r) => toLeaseRow({ ...r, due_at: 0, first_run: "" }).runs.map((d) => d.runId))
      .filter((id) => id > from && id < to);
  }
}

const toLeaseRow = (r: Record<string, SqlStorageValue>): LeaseRow => ({
  dueAt: r.due_at as number,
  firstRun: r.first_run as string,
  runs: (JSON.parse(r.runs as string) as Array<[string, number]>).map(([runId, fence]) => ({ runId, fence })),
});
