import { FINAL_STATES, IN_FLIGHT_STATES, type RunEvent, transition } from "../model/run-states";
import type { RunRow } from "../protocol/stored-rows";
import type { AttemptChange, MovedRun, RunChanges } from "./run-writes";
import type { ShardStore } from "./store";

/** Who hears of a run's steps, within the step's own transaction, after its row is written. */
export interface RunMoveHooks {
  /** Every step (counters.ts). */
  moved(before: MovedRun, events: readonly RunEvent[], after: MovedRun, attempt?: AttemptChange): void;
  /** A run reached a final state: a workflow's step moves its run on, other runs' outcomes are noted. */
  finished(run: RunRow, now: number): void;
}

/**
 * How a run takes a step of the state table (run-states.ts), with the effects every step of that
 * kind has: the one place a run's state changes (docs/architecture.md, invariant 1). The run
 * ledger (ledger.ts) is its only user; the store (store.ts) only writes what it decided.
 */
export class RunMoves {
  constructor(
    private readonly store: ShardStore,
    private readonly hooks: RunMoveHooks,
  ) {}

  /**
   * Moves a run along `event` (several: steps of the table taken in one write, a run admitted
   * and dispatched), refusing any transition the table lacks. `changes` are the other columns
   * the step sets, `attempt` what it does to the run's latest attempt.
   */
  move(run: RunRow, event: RunEvent | RunEvent[], changes: RunChanges, now: number, attempt?: AttemptChange): RunRow {
    const events = typeof event === "string" ? [event] : event;
    let to = run.state;
    for (const step of events) {
      const next = transition(to, step);
      if (next === null) throw new Error(`run ${run.id}: no transition ${to} --${step}-->`);
      to = next;
    }
    const next: RunRow = { ...run, ...changes, state: to };
    // runs_open holds the runs without finished_at: exactly the runs not final.
    if (FINAL_STATES.includes(to) === (next.finishedAt === null))
      throw new Error(`run ${run.id}: ${to} with finished_at ${next.finishedAt}`);
    if (IN_FLIGHT_STATES.includes(run.state) && !IN_FLIGHT_STATES.includes(to)) {
      // It stops being in flight: its tenant permit goes back, in this same transaction, and
      // its job's waiting runs held by maxConcurrency are looked at again now. Only a job with a
      // maxConcurrency has such runs: for any other, the wake-up would read every open run of
      // the job, a backlog parked at its tenant's gate included, for each run that ends.
      if (run.permit !== null) {
        this.store.permitReleases.addForJob(run.permit, run.jobId);
        next.permit = null;
      }
      if (this.store.getJob(run.jobId)?.spec.maxConcurrency !== undefined) this.store.admission.wakeWaiting(run.jobId, now);
    }
    this.store.writeRun(run, next, attempt);
    // After the row is written, so that whoever hears of it (a workflow reading its steps) reads it
    // as it now is. A run that was final already (a late success of a dead run) does not finish twice.
    this.hooks.moved(run, events, next, attempt);
    if (FINAL_STATES.includes(to) && !FINAL_STATES.includes(run.state)) this.hooks.finished(next, now);
    return next;
  }

  /** A run inserted already dispatched (`createRun` as `running`): its one step, as its hooks hear it. */
  bornDispatched(run: Pick<RunRow, "trigger" | "scheduledAt"> & { parentRunId?: string | null }, now: number): void {
    const born = { trigger: run.trigger, parentRunId: run.parentRunId ?? null, scheduledAt: run.scheduledAt };
    this.hooks.moved({ ...born, startedAt: null }, ["dispatch"], { ...born, startedAt: now });
  }
}
