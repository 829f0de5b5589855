import { stepRunId } from "../model/ids";
import type { CatalogEntry, JobComparison, RunView, ShardMetrics, StepRunView } from "../protocol/shard-rpc";
import type { JobDefinition, JobRuntime, RunRow } from "../protocol/stored-rows";
import type { StepStore } from "./step-store";
import type { ShardStore } from "./store";
import type { ViewStore } from "./view-store";

/** How many recent lags a metrics window samples per shard. */
const MAX_LAG_SAMPLES = 1_000;

/** What the shard shows: reads only, no transition, no settle. */
export class Views {
  constructor(
    private readonly store: ShardStore,
    private readonly reads: ViewStore,
    private readonly steps: StepStore,
  ) {}

  run(runId: string): RunView | null {
    const run = this.store.getRun(runId);
    if (!run) return null;
    const attemptLog = this.reads.attempts(runId);
    const steps = run.parentRunId === null ? this.stepsOf(run) : null;
    return { ...run, attempts: attemptLog.length, attemptLog, ...(steps && { steps }) };
  }

  /** A workflow run's steps in definition order, each as its run stands (blocked: no run yet); null for other runs. */
  private stepsOf(run: RunRow): StepRunView[] | null {
    const job = this.store.getJob(run.jobId);
    if (!job?.spec.steps) return null;
    const rows = new Map(this.steps.stepRuns(run.id).map((r) => [r.id, r]));
    const attempts = this.steps.stepAttempts(run.id);
    return job.spec.steps.map((step) => {
      const id = stepRunId(run.id, step.id);
      const row = rows.get(id);
      // A retry keeps the attempts of a step it starts again: they are shown until the step starts anew.
      const attemptLog = attempts.get(id) ?? [];
      if (!row)
        return {
          id: step.id,
          state: "blocked",
          attempt: 0,
          status: null,
          startedAt: null,
          finishedAt: null,
          result: null,
          error: null,
          attemptLog,
        };
      const { state, attempt, status, startedAt, finishedAt, result, error } = row;
      return { id: step.id, state, attempt, status, startedAt, finishedAt, result, error, attemptLog };
    });
  }

  runs(jobId: string, limit: number, before?: { scheduledAt: number; id: string }): RunView[] {
    return this.withAttemptCounts(this.reads.listRuns(jobId, limit, before));
  }

  deadLetters(
    scope: { tenantId: string | null; jobId: string | null },
    limit: number,
    before?: { finishedAt: number; id: string },
  ): RunView[] {
    return this.withAttemptCounts(this.reads.deadLetters(scope, limit, before));
  }

  standaloneJobs(ids: string[]): JobDefinition[] {
    return this.reads.standaloneJobs(ids);
  }

  listStandaloneJobs(tenantId: string | null, limit: number, beforeId: string | null): JobDefinition[] {
    return this.reads.listStandaloneJobs(tenantId, limit, beforeId);
  }

  countLiveMessages(tenantId: string, madeBefore: string): number {
    return this.reads.countLiveMessages(tenantId, madeBefore);
  }

  jobRuntimes(ids: string[]): JobRuntime[] {
    // Each job with its next fire as it stands, not as its row holds it (fired-through.ts, `live`).
    return this.store
      .getJobs(ids)
      .map((row) => this.store.firedThrough.live(this.store.frequent.current(row)))
      .map((j) => ({
        id: j.id,
        version: j.version,
        nextRunAt: j.paused ? null : j.nextFireAt,
        completed: !j.deleted && j.nextFireAt === null,
      }));
  }

  /**
   * The catalog's entries against what this shard holds: the ids it lacks or holds at an older
   * version (stale), and the deleted ones it no longer holds at all (gone: their runs have left
   * with retention, so the catalog's tombstone may go too).
   */
  compareJobs(entries: CatalogEntry[]): JobComparison {
    const held = this.reads.jobVersions(entries.map((e) => e.id));
    const comparison: JobComparison = { stale: [], gone: [] };
    for (const e of entries) {
      const version = held.get(e.id);
      if (version === undefined) (e.deleted ? comparison.gone : comparison.stale).push(e.id);
      else if (version < e.version) comparison.stale.push(e.id);
    }
    return comparison;
  }

  /** Of one tenant's runs, or of all (null). */
  metrics(
    windowMs: number,
    tenantId: string | null,
    now: number,
  ): Omit<ShardMetrics, "cost" | "outbox" | "durableObject" | "archive" | "totals"> {
    return this.reads.metrics(now - windowMs, now, MAX_LAG_SAMPLES, tenantId);
  }

  private withAttemptCounts(runs: RunRow[]): RunView[] {
    const counts = this.reads.attemptCounts(runs.map((r) => r.id));
    return runs.map((r) => ({ ...r, attempts: counts.get(r.id) ?? 0 }));
  }
}
