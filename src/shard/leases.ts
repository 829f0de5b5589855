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

/** How long a dispatch sent for the `redispatches`-th time may take to reach a consumer: doubling, capped. */
export function deliveryAllowance(claimTimeoutMs: number, redispatches: number): number {
  return claimTimeoutMs * Math.min(2 ** redispatches, MAX_WAIT_FACTOR);
}

/** A lease row: when it comes due, and the runs (with the fence each was leased under) it lists. */
export interface LeaseRow {
  dueAt: number;
  firstRun: string;
  runs: Dispatch[];
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

  /** At the end of a change, inside its transaction: a row per second its leases end in. */
  write(): void {
    for (const [dueAt, runs] of this.#pending) {
      this.mayHoldAny = true;
      this.sql.exec(
        // The same run can lead two changes' rows in one second (leased, then sent again): one row, both lists.
        `INSERT INTO leases (due_at, first_run, runs) VALUES (?, ?, ?) ON CONFLICT (due_at, first_run) DO UPDATE SET runs =
           (SELECT json_group_array(json(value)) FROM (SELECT value FROM json_each(leases.runs) UNION ALL SELECT value FROM json_each(excluded.runs)))`,
        dueAt,
        runs[0]!.runId,
        JSON.stringify(runs.map((r) => [r.runId, r.fence])),
      );
    }
    this.#pending.clear();
  }

  /** A change rolled back: the leases it took were never written. */
  forget(): void {
    this.#pending.clear();
  }

  due(now: number, limit: number): LeaseRow[] {
    return this.sql.exec("SELECT * FROM leases WHERE due_at <= ? ORDER BY due_at LIMIT ?", now, limit).toArray().map(toLeaseRow);
  }

  remove(row: LeaseRow): void {
    this.sql.exec("DELETE FROM leases WHERE due_at = ? AND first_run = ?", row.dueAt, row.firstRun);
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
