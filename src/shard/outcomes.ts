import type { RunRow } from "../protocol/stored-rows";
import { AutoPause } from "./auto-pause";
import type { Firing } from "./firing";
import type { ShardHost } from "./host";
import { NotificationStore } from "./notification-store";
import { Notifier } from "./notifier";
import type { ShardStore } from "./store";

/**
 * What a run's end sets off, for the jobs that watch their outcomes (pauseAfterFailures,
 * notify, onSuccess/onFailure): the job's streak of failures moves (auto-pause), the events its
 * notifications ask for are noted, and so are the jobs it triggers (notifier). Only such jobs
 * are read when a run finishes, from a list kept in memory (`ShardStore.watchesOutcomes`): other
 * runs finish with no extra read or write.
 */
export class Outcomes {
  readonly autoPause: AutoPause;
  readonly notifier: Notifier;

  constructor(
    host: Pick<ShardHost, "sql" | "catalog" | "queueOf" | "name" | "change">,
    private readonly store: ShardStore,
    /** An auto-paused job's new catalog version is applied like any other. */
    firing: Pick<Firing, "applyJobs">,
  ) {
    this.notifier = new Notifier(host, store, new NotificationStore(host.sql));
    // The pause is applied, and told of, as one change of the shard.
    this.autoPause = new AutoPause(store, host, (definition, reason) =>
      host.change((now) => {
        firing.applyJobs([definition], [], now);
        const job = store.getJob(definition.id);
        if (job) this.notifier.note("paused", job, null, now, reason);
      }),
    );
  }

  /** A run reached a final state, within its step's transaction. */
  noteFinished(run: RunRow): void {
    if (run.state === "dead") this.noteQstashTimeout(run);
    if (!this.store.watchesOutcomes(run.jobId)) return;
    const job = this.store.getJob(run.jobId);
    if (!job) return;
    const endedStreak = this.autoPause.noteFinished(run, job);
    const now = Date.now();
    this.notifier.chain(job, run, now);
    if (run.state === "failed" || run.state === "dead") this.notifier.note(run.state, job, run, now);
    else if (run.state === "succeeded" && endedStreak > 0)
      this.notifier.note("recovered", job, run, now, `after ${endedStreak} runs in a row that ended failed or dead`);
  }

  /** A QStash message dead because its shard timed its last attempt out: its failure callback is the consumer's to send. */
  private noteQstashTimeout(run: RunRow): void {
    if (run.parentRunId !== null) return;
    const job = this.store.getJob(run.jobId);
    if (!job?.spec.target?.qstash?.failureCallback) return;
    if (this.store.attempts.get(run.id, run.fence)?.outcome !== "timed_out") return;
    this.notifier.qstashTimedOut(job, run);
  }
}
