/**
 * The shard's counters since its storage was created (totals.ts says which), kept the way the
 * meter keeps its tally: counted in memory, and written with the tally, on the row the meter
 * writes anyway (`cost_tallies.totals`, shard schema step 19), so a run costs no row for them
 * (docs/cost.md). A shard that starts again carries on from the last totals written; what an
 * object counted and did not write before it went is lost, so the counters undercount, but
 * never go back (docs/metrics.md).
 *
 * The hook points are the run's own steps (`RunMoves.move`, which every transition takes:
 * docs/architecture.md, invariant 1), its end (the moves' `finished` hook), a dispatch made
 * (`Dispatcher.send`), and the object's start and alarms (meter.ts).
 */

import type { RunEvent } from "../model/run-states";
import { countLag } from "../protocol/alarm-lag";
import type { RunRow } from "../protocol/stored-rows";
import { addTotals, countFireLag, noTotals, type ShardTotals } from "../protocol/totals";
import type { AttemptChange, MovedRun } from "./run-writes";

export class ShardCounters {
  /** The totals as last written or read back; undefined until read, once per object. */
  private stored: ShardTotals | undefined;
  /** Counted since, committed. */
  private added = noTotals();
  /** Counts made inside a change, kept apart until it commits (`release`); null outside a change. */
  private pending: Array<(t: ShardTotals) => void> | null = null;

  /** A change of the shard's state begins (the meter's `beginChange`): what it counts stands only if it commits. */
  hold(): void {
    this.pending = [];
  }

  /** The change ended: committed, what it counted is added; rolled back, it is dropped. */
  release(committed: boolean): void {
    const pending = this.pending ?? [];
    this.pending = null;
    if (committed) for (const count of pending) count(this.added);
  }

  /** A run moved along `events`, taken as one write (its row before and after; `attempt`, what the step did to its latest attempt). */
  moved(before: MovedRun, events: readonly RunEvent[], after: MovedRun, attempt: AttemptChange | undefined): void {
    if (attempt && "finish" in attempt) {
      const outcome = attempt.finish.outcome;
      this.add((t) => (t.attempts[outcome] = (t.attempts[outcome] ?? 0) + 1));
    }
    const event = events.at(-1);
    if (event === "retry") this.add((t) => t.retries++);
    else if (event === "redispatch") this.add((t) => t.redispatches++);
    else if (event === "abandon") this.add((t) => t.queueDeadLetters++);
    // The first dispatch of a scheduled run, when its attempt begins, as the window's fire lag picks them (view-store.ts).
    else if (
      event === "dispatch" &&
      before.startedAt === null &&
      after.startedAt !== null &&
      before.trigger === "schedule" &&
      before.parentRunId === null
    ) {
      const lag = after.startedAt - before.scheduledAt;
      this.add((t) => countFireLag(t.fireLag, lag));
    }
  }

  /** A run reached a final state (a workflow's step does not: its workflow run does, when it ends). */
  finished(run: RunRow): void {
    this.add((t) => (t.runsFinished[run.state] = (t.runsFinished[run.state] ?? 0) + 1));
  }

  /** A dispatch was made (sent after its change commits). */
  dispatched(): void {
    this.add((t) => t.dispatches++);
  }

  started(): void {
    this.add((t) => t.starts++);
  }

  alarmLag(lagMs: number): void {
    this.add((t) => countLag(t.alarmLag, lagMs));
  }

  /**
   * The totals to write now: those stored (read with `read` the first time: the latest written,
   * or none) plus what was counted since, which then counts as stored.
   */
  toWrite(read: () => ShardTotals | null): ShardTotals {
    const stored = this.load(read);
    addTotals(stored, this.added);
    this.added = noTotals();
    return stored;
  }

  /** The totals as they stand, what is not yet written included. */
  current(read: () => ShardTotals | null): ShardTotals {
    return addTotals(addTotals(noTotals(), this.load(read)), this.added);
  }

  private load(read: () => ShardTotals | null): ShardTotals {
    this.stored ??= read() ?? noTotals();
    return this.stored;
  }

  private add(count: (t: ShardTotals) => void): void {
    if (this.pending) this.pending.push(count);
    else count(this.added);
  }
}
