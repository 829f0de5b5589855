import { autoPauseJob, toDefinition } from "../catalog/jobs";
import type { JobDefinition, RunRow } from "../protocol/stored-rows";
import type { ShardHost } from "./host";
import type { ShardJob } from "./rows";
import { stoppedReason } from "./run-stops";
import type { ShardStore } from "./store";

/** What made a job's streak reach its limit, for the reason the job shows. */
interface Trigger {
  runId: string;
  state: string;
  error: string | null;
}

/**
 * Auto-pause (a job's `pauseAfterFailures`): the shard counts the runs in a row that ended dead
 * or failed, and once they reach the limit it pauses the job the way a person's pause does:
 * in the catalog first (version + 1, with `pausedReason`), then here, which cancels what was
 * pending. The catalog write is I/O, so it happens after the finishing step commits (`flush`,
 * from the shard's settle). Should the write fail or the shard stop before it, the job's next
 * failed run asks again: the streak is still at or past the limit.
 */
export class AutoPause {
  readonly #due = new Map<string, Trigger>();

  constructor(
    private readonly store: ShardStore,
    private readonly host: Pick<ShardHost, "catalog">,
    /** Applies a catalog version of a job to the shard, as one change, and tells of the pause. */
    private readonly apply: (definition: JobDefinition, reason: string) => void,
  ) {}

  /**
   * A run of a job that watches its outcomes reached a final state, within that step's
   * transaction: the job's streak of failures moves. Returns the streak a success ended (0 if
   * none), which is what makes a recovery.
   */
  noteFinished(run: RunRow, job: ShardJob): number {
    if (run.state === "succeeded") {
      if (job.failureStreak > 0) this.store.endFailureStreak(job.id);
      return job.failureStreak;
    }
    if (run.state !== "dead" && run.state !== "failed") return 0; // cancelled, skipped: no verdict
    const streak = this.store.extendFailureStreak(job.id);
    const limit = job.spec.pauseAfterFailures;
    if (limit !== undefined && streak >= limit && !stoppedReason(job))
      this.#due.set(job.id, { runId: run.id, state: run.state, error: run.error });
    return 0;
  }

  /** Pauses the jobs whose streak reached their limit. Never throws: a failure is retried by the next failed run. */
  async flush(): Promise<void> {
    for (const [jobId, trigger] of [...this.#due]) {
      this.#due.delete(jobId);
      // Looked at again now: the change that noted it may have rolled back, or a resume, a
      // success or a PATCH of the limit may have come since.
      const job = this.store.getJob(jobId);
      const limit = job?.spec.pauseAfterFailures;
      if (!job || limit === undefined || job.failureStreak < limit || stoppedReason(job)) continue;
      try {
        const reason = pausedReason(job.failureStreak, trigger);
        const paused = await autoPauseJob(this.host.catalog(), jobId, reason, Date.now());
        // Null: a person paused or deleted it meanwhile, and that change reaches the shard as usual.
        if (paused) this.apply(toDefinition(paused), reason);
      } catch (err) {
        console.error(`job ${jobId}: auto-pause could not be saved; its next failed run tries again`, err);
      }
    }
  }
}

function pausedReason(streak: number, last: Trigger): string {
  const detail = last.error ? `: ${last.error.slice(0, 200)}` : "";
  return `paused by edgecron after ${streak} runs in a row ended dead or failed (pauseAfterFailures); the last, ${last.runId}, ended ${last.state}${detail}`;
}
