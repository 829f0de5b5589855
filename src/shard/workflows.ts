import { failpoint } from "../faults";
import { stepOfRun, stepRunId } from "../model/ids";
import type { Answer } from "../protocol/shard-rpc";
import type { RunRow } from "../protocol/stored-rows";
import { advance, runOutcome, type StepStatus, stepsToRerun, topologicalOrder } from "../workflow/graph";
import { SKIPPED_CONDITION, SKIPPED_UPSTREAM_FAILED, statusOfStepRun, upstreamInput } from "../workflow/steps";
import type { ShardHost } from "./host";
import type { RunLedger } from "./ledger";
import type { RunToWrite, ShardJob } from "./rows";
import { stoppedReason } from "./run-stops";
import { StepStore } from "./step-store";
import type { ShardStore } from "./store";

/**
 * Each generation of a workflow run's steps (the first, then one per retry of the run) starts its
 * step runs' fences this far above the last: a step run allows at most 20 attempts, each one
 * fence, so an outcome of a step run a retry replaced can never match the new one's fence
 * (docs/architecture.md, invariant 4).
 */
const FENCES_PER_GENERATION = 100;

/**
 * Workflows (issue 11, docs/workflows.md): a workflow job's run starts its steps instead of
 * calling a target. Each step is a run of its own in this shard (`stepRunId`), made when the
 * graph (src/workflow/graph.ts) starts it and dispatched, fenced, leased, retried and
 * reported like any run; each time one ends, its workflow run moves on in the same transaction:
 * the steps it releases are made queued, those that can no longer run are made skipped, and
 * once every step has ended the run ends succeeded, or failed when a step failed.
 */
export class Workflows {
  readonly steps: StepStore;

  constructor(
    host: Pick<ShardHost, "sql">,
    private readonly store: ShardStore,
    private readonly ledger: RunLedger,
  ) {
    this.steps = new StepStore(host.sql);
    ledger.useWorkflows(this);
  }

  /** A workflow run the ledger would dispatch begins its steps instead: no dispatch, no attempt of its own. */
  begin(runId: string, now: number): void {
    const run = this.store.getRun(runId);
    if (run?.state !== "queued") return;
    this.advance(this.ledger.beginWorkflow(run, now), now);
  }

  /**
   * A run reached a final state (within its own transaction). A step's run moves its workflow
   * run on; a cancelled workflow run (a replace, a delete) cancels its steps not yet under way.
   */
  ended(run: RunRow, now: number): "step" | "run" {
    if (run.parentRunId !== null) {
      const parent = this.store.getRun(run.parentRunId);
      if (parent) this.advance(parent, now);
      failpoint("shard.stepEnded", run.jobId);
      return "step";
    }
    // Only a workflow job's runs have steps: any other run ends without a read of them.
    if (run.state === "cancelled" && this.store.getJob(run.jobId)?.spec.steps) this.cancelSteps(run, now);
    return "run";
  }

  private cancelSteps(run: RunRow, now: number): void {
    for (const step of this.steps.stepRuns(run.id)) {
      if (step.state === "queued" || step.state === "retry_wait" || step.state === "waiting") {
        this.ledger.cancel(step, `its workflow run was cancelled: ${run.error ?? "cancelled"}`, now);
      }
    }
  }

  /**
   * A job changed: resumed, its workflow runs start the steps the pause held back; deleted, they
   * end cancelled (their steps in flight finish, their late outcomes change nothing).
   */
  jobChanged(job: ShardJob, wasPaused: boolean, now: number): void {
    if (!job.spec.steps) return;
    const resumed = wasPaused && !job.paused && !job.deleted;
    if (!resumed && !job.deleted) return;
    for (const run of this.steps.workflowsInProgress(job.id)) {
      if (job.deleted) this.ledger.cancel(run, "job deleted", now);
      else this.advance(run, now);
    }
  }

  /**
   * POST /v1/runs/:id/retry. For a failed workflow run, every step that did not succeed goes back
   * to blocked first (its run removed, its attempts kept), succeeded steps keep their results;
   * the revived run then begins again and starts what the graph allows. Other runs: the ledger's.
   */
  revive(runId: string, now: number): Answer<RunRow, "unknown_run" | "not_retryable"> {
    const run = this.store.getRun(runId);
    const job = run && this.store.getJob(run.jobId);
    if (run && job && this.ledger.revivable(run)) this.blockUnsucceeded(run, job);
    return this.ledger.revive(runId, now);
  }

  private blockUnsucceeded(run: RunRow, job: ShardJob): void {
    if (!job.spec.steps) return;
    const rows = new Map(this.steps.stepRuns(run.id).map((r) => [stepOfRun(r.id)!.stepId, r]));
    const statuses = Object.fromEntries([...rows].map(([id, r]) => [id, statusOfStepRun(r)]));
    for (const stepId of stepsToRerun(job.spec.steps, statuses)) {
      const row = rows.get(stepId);
      if (row) this.steps.removeStepRun(row.id);
    }
  }

  /** The JSON a step without a body of its own is sent: the run and its parents' results. */
  inputOf(step: Pick<RunRow, "id" | "scheduledAt">, job: ShardJob): string | null {
    const ids = stepOfRun(step.id);
    const node = ids && job.spec.steps?.find((s) => s.id === ids.stepId);
    if (!ids || !node) return null;
    const parents = (node.after ?? []).map((p) => ({ stepId: p, result: this.store.getRun(stepRunId(ids.runId, p))?.result ?? null }));
    return upstreamInput(ids.runId, step.scheduledAt, parents);
  }

  /**
   * Everything the steps' states allow now, in one pass: skips are made (final at once), new
   * steps are started unless the job is paused (its steps in flight finish, with their retries;
   * resume starts the rest), and the run ends once every step has ended.
   */
  private advance(run: RunRow, now: number): void {
    if (run.state !== "running" || run.parentRunId !== null) return;
    const job = this.store.getJob(run.jobId);
    if (!job?.spec.steps || job.deleted) return;
    const order = topologicalOrder(job.spec.steps) ?? job.spec.steps;
    const statuses: Record<string, StepStatus> = {};
    for (const row of this.steps.stepRuns(run.id)) statuses[stepOfRun(row.id)!.stepId] = statusOfStepRun(row);
    const decided = advance(order, statuses);
    const stepRun = (stepId: string): RunToWrite => ({
      id: stepRunId(run.id, stepId),
      jobId: run.jobId,
      jobVersion: job.version,
      trigger: run.trigger,
      scheduledAt: run.scheduledAt,
      catchUp: run.catchUp,
      watched: false,
      parentRunId: run.id,
      fence: (run.fence - 1) * FENCES_PER_GENERATION + 1,
    });
    for (const { id, upstreamFailed } of decided.skip) {
      this.ledger.create(stepRun(id), now, { state: "skipped", reason: upstreamFailed ? SKIPPED_UPSTREAM_FAILED : SKIPPED_CONDITION });
      statuses[id] = { state: "skipped", upstreamFailed };
    }
    if (stoppedReason(job) === null) {
      for (const id of decided.start) {
        this.ledger.create(stepRun(id), now, { state: "queued", job });
        statuses[id] = { state: "active" };
      }
    }
    const outcome = runOutcome(order, statuses);
    if (outcome === "succeeded") this.ledger.endWorkflow(run, [], now);
    else if (outcome === "failed") {
      this.ledger.endWorkflow(
        run,
        order.filter((s) => statuses[s.id]?.state === "failed").map((s) => s.id),
        now,
      );
    }
  }
}
