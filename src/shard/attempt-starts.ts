import { breakerKey } from "../gate/breaker";
import { parsePermitKey } from "../gate/permit-keys";
import { groupLimits } from "../model/flow-control";
import { newCompletionToken } from "../model/ids";
import type { StoredTarget } from "../model/job";
import type { RunEvent } from "../model/run-states";
import type { KeyedDispatch } from "../protocol/queue-messages";
import type { RunRow } from "../protocol/stored-rows";
import { isWorkflowRun, stepPolicy, targetOfRun } from "../workflow/steps";
import type { ShardHost } from "./host";
import { dispatchLeaseMs } from "./lease-length";
import type { DispatchOutbox } from "./ledger-ports";
import { runOrder, signingOf } from "./orders";
import type { RunToWrite, ShardJob } from "./rows";
import type { RunMoves } from "./run-moves";
import type { RunChanges } from "./run-writes";
import type { ShardStore } from "./store";

/** What a leased attempt's order is made of. */
type LeasedRun = Pick<RunRow, "id" | "fence" | "jobId" | "attempt" | "scheduledAt" | "parentRunId">;

/** What the ledger asks of workflows (workflows.ts) when one of their runs would be dispatched. */
export interface WorkflowSteps {
  /** A workflow run begins its steps where another run would be dispatched. */
  begin(runId: string, now: number): void;
  /** A workflow step's input, for its order. */
  inputOf(step: Pick<RunRow, "id" | "scheduledAt">, job: ShardJob): string | null;
}

/**
 * How a run's attempt goes out, for the run ledger (ledger.ts, its only user): dispatched with
 * its order and leased in the one write that starts it (there is no claim: docs/architecture.md,
 * invariant 5), sent again under the same fence when its dispatch was lost, and the tenant
 * permit that covers it extended with each lease.
 */
export class AttemptStarts {
  /** Set once workflows exist (workflows.ts), since they write their step runs through the ledger. */
  steps: WorkflowSteps = { begin: () => {}, inputOf: () => null };

  constructor(
    private readonly host: Pick<ShardHost, "name" | "claimTimeoutMs">,
    private readonly store: ShardStore,
    private readonly moves: RunMoves,
    /** Where dispatches go out once the change commits. */
    private readonly outbox: DispatchOutbox,
  ) {}

  /**
   * A run due to start (`queued`, or a step of `events` leading there) starts its attempt: the
   * run is dispatched with the attempt's order and leased in this one write. A workflow run
   * begins its steps instead; a step a PATCH took out of its job's graph has nothing to call,
   * and ends cancelled.
   */
  start(run: RunRow, events: RunEvent[], changes: RunChanges, job: ShardJob | null, now: number): void {
    if (job && isWorkflowRun(job.spec, run.id)) {
      // To `queued`, from which the workflow run begins its steps in this same transaction.
      if (events.length > 0) this.moves.move(run, events, { ...changes, dueAt: null }, now);
      this.steps.begin(run.id, now);
      return;
    }
    const target = job && targetOfRun(job.spec, run.id);
    if (!job || !target) {
      const error = "its step is no longer in the job's steps";
      this.moves.move(run, [...events, "cancel"], { ...changes, dueAt: null, finishedAt: now, error }, now);
      return;
    }
    const fence = changes.fence ?? run.fence;
    const attempt = changes.attempt ?? run.attempt;
    const completionToken = newCompletionToken(this.host.name(), fence);
    const leaseUntil = now + this.leaseMs(job, run.id, 0);
    const next = this.moves.move(
      run,
      [...events, "dispatch"],
      // The run executes the job as it is now; it records that version (a PATCH may have come).
      { ...changes, dueAt: null, leaseUntil, redispatches: 0, startedAt: run.startedAt ?? now, jobVersion: job.version },
      now,
      { start: { attempt, fence, startedAt: now, completionToken } },
    );
    this.sendLeased(next, job, target, completionToken, leaseUntil);
    // A run's own permit was leased for its first attempt when it was admitted; a workflow run
    // holds one while its steps run, so each step's dispatch extends it by that step's lease.
    if (run.parentRunId !== null) this.renewCover(run, leaseUntil - now);
  }

  /** A new run of a job with a target, inserted dispatched and leased (`createRun` as `running`); false when it exists. */
  createDispatched(run: RunToWrite, job: ShardJob, target: StoredTarget, now: number): boolean {
    const fence = run.fence ?? 1;
    const completionToken = newCompletionToken(this.host.name(), fence);
    const leaseUntil = now + this.leaseMs(job, run.id, 0);
    const created = this.store.fires.createRun(run, now, { state: "running", leaseUntil, completionToken });
    if (!created) return false;
    this.moves.bornDispatched(run, now);
    const leased = { id: run.id, fence, jobId: run.jobId, attempt: 1, scheduledAt: run.scheduledAt, parentRunId: run.parentRunId ?? null };
    this.sendLeased(leased, job, target, completionToken, leaseUntil);
    if (leased.parentRunId !== null) this.renewCover({ ...leased, permit: null }, leaseUntil - now);
    return true;
  }

  /**
   * A leased attempt whose dispatch is lost goes out again: the same fence and attempt, the
   * completion token its dispatch carried, and a lease whose allowance for the queue doubles.
   * A run that holds its own permit goes out only once its gate confirms the permit: its lease
   * may have run out at the gate meanwhile (an outage longer than it) and its place gone to a
   * run admitted since; then the attempt ends as a lost one, and a retry waits for a place
   * (docs/architecture.md, invariant 10). A workflow's step extends its run's permit as before.
   */
  redispatch(run: RunRow, event: "redispatch" | "abandon", changes: RunChanges, now: number): void {
    const job = this.store.getJob(run.jobId);
    const { attempt } = this.store.attempts.runAndAttempt(run.id, run.fence);
    const target = job && targetOfRun(job.spec, run.id);
    if (!job || !target || !attempt) return;
    const redispatches = run.redispatches + 1;
    const leaseMs = this.leaseMs(job, run.id, redispatches);
    const next = this.moves.move(run, event, { ...changes, leaseUntil: now + leaseMs, redispatches }, now);
    if (run.parentRunId === null && run.permit !== null) {
      const { tenant, group } = parsePermitKey(run.permit);
      const fc = job.spec.flowControl;
      const limits = fc && fc.key === group ? groupLimits(fc) : {};
      const ask = { permit: run.permit, tenant, ...(group !== null && { group: { key: group, ...limits } }) };
      this.sendLeased(next, job, target, attempt.completionToken, now + leaseMs, (d) =>
        this.outbox.sendOnPermit(d, { tenantId: job.tenantId, ask, until: now + leaseMs }),
      );
      return;
    }
    this.sendLeased(next, job, target, attempt.completionToken, now + leaseMs);
    this.renewCover(run, leaseMs);
  }

  /** Extends the tenant permit that covers `run`: its own, or a step's workflow run's. */
  renewCover(run: Pick<RunRow, "parentRunId" | "permit" | "jobId">, leaseMs: number): void {
    const holder = run.parentRunId === null ? run : this.store.getRun(run.parentRunId);
    if (holder?.permit) this.outbox.renewPermitLater(holder, leaseMs);
  }

  /** A leased attempt's dispatch, with its order, goes out after commit; its lease is listed for the alarm (leases.ts). */
  private sendLeased(
    run: LeasedRun,
    job: ShardJob,
    target: StoredTarget,
    token: string,
    until: number,
    send: (d: KeyedDispatch) => void = (d) => this.outbox.send(d),
  ): void {
    const signing = signingOf(this.store.getTenant(job.tenantId));
    const order = runOrder(run, job, target, signing, token, run.parentRunId === null ? null : this.steps.inputOf(run, job), until);
    this.store.leases.lease(run.id, run.fence, until);
    send({ runId: run.id, fence: run.fence, ...breakerKey(job, target), order });
  }

  /** How long a lease taken now lasts: the dispatch's time to reach a consumer (doubling with each resend), the attempt's timeout, a grace. */
  private leaseMs(job: Pick<ShardJob, "spec">, runId: string, redispatches: number): number {
    return dispatchLeaseMs(this.host.claimTimeoutMs(), redispatches, stepPolicy(job.spec, runId).timeoutMs);
  }
}
