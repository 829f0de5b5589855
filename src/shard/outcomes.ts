import type { OutboxMessage } from "../protocol/queue-messages";
import type { JobDefinition, RunRow } from "../protocol/stored-rows";
import { AutoPause } from "./auto-pause";
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
    private readonly store: ShardStore,
    sql: Pick<SqlStorage, "exec">,
    catalog: () => D1Database,
    queueOf: (shard: string) => Queue<OutboxMessage>,
    shardName: () => string,
    /** Applies an auto-paused job's new catalog version as one change of the shard, in which `then` runs too. */
    applyPause: (definition: JobDefinition, then: (now: number) => void) => void,
  ) {
    this.notifier = new Notifier(store, new NotificationStore(sql), queueOf, shardName);
    this.autoPause = new AutoPause(store, catalog, (definition, reason) =>
      applyPause(definition, (now) => {
        const job = store.getJob(definition.id);
        if (job) this.notifier.note("paused", job, null, now, reason);
      }),
    );
  }

  /** A run reached a final state, within its step's transaction. */
  noteFinished(run: RunRow): void {
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
}
