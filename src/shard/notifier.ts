import { failpoint } from "../faults";
import { chainDepthOf } from "../model/ids";
import { MAX_CHAIN_DEPTH, type NotifyEvent } from "../model/job";
import type { OutboxMessage } from "../protocol/queue-messages";
import type { RunRow } from "../protocol/stored-rows";
import { sealedUrlOf } from "../security/notify-urls";
import type { Sealed } from "../security/sealing";
import type { ShardHost } from "./host";
import type { NotificationStore } from "./notification-store";
import { signingOf } from "./orders";
import type { NotificationRow, ShardJob } from "./rows";
import type { ShardStore } from "./store";

/** A notification whose delivery is not confirmed by then is sent again; the wait doubles each time. */
const NOTIFY_RESEND_MS = 5 * 60_000;
/** After this many sends a notification is given up (and logged): its receiver has been away for hours. */
const NOTIFY_MAX_SENDS = 6;
const RESEND_BATCH = 100;
const QUEUE_BATCH = 100;

/**
 * A job's notifications (`notify`) and chained jobs (`onSuccess`/`onFailure`): the shard's
 * outbox for them. A message is written in the same transaction as the step it tells of (a run
 * ending failed or dead, one succeeding after such runs, edgecron pausing the job; for a chain,
 * a run ending), and sent through the dispatch queue once that commits. The consumer delivers
 * it (a POST to the receiver; for a chain, the chained job's shard asked for its run) and
 * confirms (`delivered`), which removes the row; one not confirmed in time is sent again by the
 * alarm, so delivery is at least once, with its own retries, and never holds up the job's runs
 * (docs/jobs-and-schedules.md, "Notifications"). A chained run's id is derived from the run that ended, so a repeated
 * delivery triggers nothing twice.
 */
export class Notifier {
  /** Committed (or about to be) and not yet handed to the Queue. */
  #unsent: OutboxMessage[] = [];

  constructor(
    private readonly host: Pick<ShardHost, "queueOf" | "name">,
    private readonly store: ShardStore,
    private readonly outbox: NotificationStore,
  ) {}

  /** Within the step's transaction: the notification of `event`, if the job asks for it. */
  note(event: NotifyEvent, job: ShardJob, run: RunRow | null, now: number, detail?: string): void {
    const notify = job.spec.notify ?? this.store.getTenant(job.tenantId)?.notify;
    if (!notify?.on.includes(event)) return;
    // One per event of a run, or of a job version (a pause makes a new version): a repeat adds none.
    const id = `${run?.id ?? `${job.id}@${job.version}`}:${event}`;
    const body = JSON.stringify({
      event,
      at: new Date(now).toISOString(),
      jobId: job.id,
      tenantId: job.tenantId,
      run: run && {
        id: run.id,
        state: run.state,
        scheduledAt: new Date(run.scheduledAt).toISOString(),
        attempt: run.attempt,
        status: run.status,
        error: run.error,
      },
      ...(detail !== undefined && { detail }),
    });
    // The URL goes in as it is stored, sealed: the consumer opens it to send (src/security/notify-urls.ts).
    const sealed = sealedUrlOf(notify);
    const url = typeof sealed === "string" ? sealed : JSON.stringify(sealed);
    this.add({ kind: "notify", id, jobId: job.id, tenantId: job.tenantId, url, body, dueAt: now + NOTIFY_RESEND_MS });
  }

  /** Within the step's transaction: the jobs a finished run triggers (onSuccess, onFailure), one message each. */
  chain(job: ShardJob, run: RunRow, now: number): void {
    const chained =
      run.state === "succeeded" ? job.spec.onSuccess : run.state === "failed" || run.state === "dead" ? job.spec.onFailure : undefined;
    if (chained && chainDepthOf(run.id) >= MAX_CHAIN_DEPTH) {
      console.warn(`run ${run.id} is ${MAX_CHAIN_DEPTH} chained hops from its chain's first run: ${chained.join(", ")} not triggered`);
      return;
    }
    for (const jobId of chained ?? []) {
      this.add({
        kind: "chain",
        id: `${run.id}:chain:${jobId}`,
        jobId: job.id,
        tenantId: job.tenantId,
        url: jobId,
        body: "",
        dueAt: now + NOTIFY_RESEND_MS,
      });
    }
  }

  /**
   * Within the step's transaction: a QStash message's last attempt timed out by its shard, whose
   * failure callback no consumer sent (QstashTimeoutMessage). Sent after commit, with no row: a
   * callback is at most once (docs/qstash.md).
   */
  qstashTimedOut(job: ShardJob, run: RunRow): void {
    const id = `${run.id}:${run.fence}:qstash_timeout`;
    this.#unsent.push({ kind: "qstash_timeout", shard: this.host.name(), id, tenantId: job.tenantId, runId: run.id, fence: run.fence });
  }

  private add(row: Omit<NotificationRow, "sends">): void {
    if (this.outbox.add(row)) this.#unsent.push(this.message(row));
  }

  /** Within the alarm's transaction: notifications not confirmed in time go out again, or are given up. */
  resendDue(now: number): void {
    const given: string[] = [];
    for (const n of this.outbox.due(now, RESEND_BATCH)) {
      if (n.sends + 1 >= NOTIFY_MAX_SENDS) {
        // A receiver's URL may be its credential: the id (the run and the event) says enough.
        const what = n.kind === "chain" ? `chained trigger ${n.id}` : `notification ${n.id}`;
        console.error(`${what}: not confirmed after ${n.sends + 1} sends, given up`);
        given.push(n.id);
        continue;
      }
      this.outbox.sent(n.id, now + NOTIFY_RESEND_MS * 2 ** (n.sends + 1));
      this.#unsent.push(this.message(n));
    }
    this.outbox.remove(given);
  }

  /** The consumer delivered these: their rows go. */
  delivered(ids: string[]): void {
    this.outbox.remove(ids);
  }

  /** Hands what is committed to the Queue. A refused send is left to the row's resend. */
  async flush(): Promise<void> {
    const pending = this.#unsent.splice(0);
    for (let i = 0; i < pending.length; i += QUEUE_BATCH) {
      const chunk = pending.slice(i, i + QUEUE_BATCH);
      try {
        failpoint("shard.notifySend", this.host.name());
        await this.host.queueOf(this.host.name()).sendBatch(chunk.map((body) => ({ body, contentType: "json" as const })));
      } catch (err) {
        console.error(`shard ${this.host.name()}: ${chunk.length} notifications not sent now; they go again at their resend time`, err);
      }
    }
  }

  /** When the notifier next has work: now for what is unsent, else the earliest resend. */
  nextDue(now: number): number | null {
    return this.#unsent.length > 0 ? now : this.outbox.earliest();
  }

  /** Where the unsent list ends before a change; `rollBack(mark)` forgets what a failed change added. */
  mark(): number {
    return this.#unsent.length;
  }

  rollBack(mark: number): void {
    this.#unsent.length = Math.min(mark, this.#unsent.length);
  }

  private message(n: Omit<NotificationRow, "sends">): OutboxMessage {
    if (n.kind === "chain") {
      const fromRunId = n.id.slice(0, n.id.indexOf(":chain:"));
      return { kind: "chain", shard: this.host.name(), id: n.id, tenantId: n.tenantId, jobId: n.url, fromRunId };
    }
    return {
      kind: "notify",
      shard: this.host.name(),
      id: n.id,
      // A notification's id ends with its event (`note`).
      event: n.id.slice(n.id.lastIndexOf(":") + 1) as NotifyEvent,
      url: n.url.startsWith("{") ? (JSON.parse(n.url) as Sealed) : n.url,
      tenantId: n.tenantId,
      ...signingOf(this.store.getTenant(n.tenantId)),
      body: n.body,
    };
  }
}
