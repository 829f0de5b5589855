import { DurableObject } from "cloudflare:workers";
import { config } from "../config";
import { countingStub } from "../cost/counting-stub";
import { failpoint } from "../faults";
import type { Dispatch, Outcome } from "../protocol/queue-messages";
import {
  type Answer,
  type BackfillResult,
  type CatalogEntry,
  type Completion,
  done,
  type JobComparison,
  type OpenResult,
  type RunView,
  type ShardApi,
  type ShardMetrics,
  type TokenRefusal,
  type TriggeredBy,
} from "../protocol/shard-rpc";
import type { JobDefinition, JobRuntime, TenantSettings } from "../protocol/stored-rows";
import { dispatchQueue } from "../queues";
import { gateStub } from "../stubs";
import type { Admitter } from "./admitter";
import { makeCapabilities } from "./capabilities";
import type { Completions } from "./completion";
import type { Dispatcher } from "./dispatch";
import { FIRE_CHUNK, type Firing } from "./firing";
import type { ShardHost } from "./host";
import { type RunLedger, TICK_BATCH } from "./ledger";
import { ALARM, SETTLE, ShardMeter } from "./meter";
import { migrateShard, ShardSchemaTooNew } from "./migrations";
import type { Outcomes } from "./outcomes";
import type { Retention } from "./retention";
import type { ShardStore } from "./store";
import type { Views } from "./views";
import type { Workflows } from "./workflows";

/** A shard with nothing due within this long counts as going idle (see `metered`). */
const IDLE_AFTER_MS = 5_000;

/**
 * One shard: the single writer of its jobs' runtime state (docs/architecture.md, invariant 1).
 * The class only wires its capabilities: each RPC method is one transaction over them, then
 * `settle`; all timing goes through the one alarm, pointed at the earliest thing any
 * capability has to do. What each capability owns, and what it offers the alarm:
 * docs/architecture.md, "The shard's capabilities" (firing, ledger, admission, dispatch,
 * completion, outcomes, views, retention, the cost meter).
 */
export class Shard extends DurableObject<Env> implements ShardApi {
  private readonly meter: ShardMeter;
  private readonly store: ShardStore;
  private readonly ledger: RunLedger;
  private readonly firing: Firing;
  private readonly admitter: Admitter;
  private readonly dispatcher: Dispatcher;
  private readonly completions: Completions;
  private readonly views: Views;
  private readonly retention: Retention;
  private readonly outcomes: Outcomes;
  private readonly workflows: Workflows;
  /** Set when the storage is newer than this code: every call and the alarm throw it, and nothing is written. */
  private readonly refusal: ShardSchemaTooNew | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    // One transaction: a shard an earlier release created is upgraded all at once or not at all.
    try {
      ctx.storage.transactionSync(() => migrateShard(ctx.storage.sql));
    } catch (err) {
      if (!(err instanceof ShardSchemaTooNew)) throw err;
      // Logged once per instance, not per call; the calls' own errors say it each time.
      console.error(`shard ${ctx.id.name ?? ctx.id.toString()}: ${err.message}`);
      this.refusal = err;
    }
    const meter = new ShardMeter(ctx.storage.sql);
    this.meter = meter;
    // This design's leader election: a new instance becomes the shard's single writer (created,
    // or again after an eviction, a restart or a deploy).
    meter.countStart();
    // The one place each setting and binding is read for the capabilities (host.ts).
    const host: ShardHost = {
      name: () => this.name,
      claimTimeoutMs: () => config(env).claimTimeoutMs,
      change: (apply) => this.change(apply),
      gateOf: (tenantId) => countingStub(gateStub(env, tenantId), () => meter.count("gateRequests")),
      queueOf: (shard) => dispatchQueue(env, shard),
      catalog: () => env.DB,
      sql: meter.sql,
      meter,
    };
    ({
      store: this.store,
      ledger: this.ledger,
      firing: this.firing,
      admitter: this.admitter,
      dispatcher: this.dispatcher,
      completions: this.completions,
      views: this.views,
      retention: this.retention,
      outcomes: this.outcomes,
      workflows: this.workflows,
    } = makeCapabilities(host, (env as Partial<Env>).ARCHIVE));
  }

  // ---- the alarm ----

  /**
   * Fires what is due and moves runs whose time has come. Safe to run again at any point: a
   * re-run finds the fires not yet made still due (run ids are derived, so no second run), and
   * dispatches committed but not sent are sent by the next flush, or when their lease ends
   * after a crash (dispatch.ts). The alarm is re-armed last, in `settle`: one re-armed before a
   * throw would lose the runtime's retry.
   */
  override async alarm(info?: AlarmInvocationInfo): Promise<void> {
    this.refuseIfTooNew();
    this.meter.alarmStarted(Date.now(), info);
    return this.metered(ALARM, () => this.runAlarm());
  }

  /**
   * Due fires are committed FIRE_CHUNK jobs per transaction, and each chunk's dispatches are
   * sent while the next chunks are written (docs/architecture.md, invariant 6): a chunk's
   * commit starts the send, the event loop takes a turn so that it goes out, then the next
   * chunk. Each chunk is whole or not at all, so a crash between chunks loses nothing: the
   * jobs not fired are still due. Calls interleave at each turn; every chunk reads what is due
   * afresh, so nothing read before a turn is trusted after it. Then the due runs (resends,
   * retries, expired leases) move on in one more transaction, after the fires as before: they
   * are not a burst's first sends, and chunks of them would each read again the waiting runs
   * that `advanceDue` reads and leaves due.
   */
  private async runAlarm(): Promise<void> {
    failpoint("shard.alarmStart", this.name);
    const sending: Promise<void>[] = [];
    try {
      for (let fired = 0; fired < TICK_BATCH; ) {
        const limit = Math.min(FIRE_CHUNK, TICK_BATCH - fired);
        const made = this.alarmChange((now) => {
          const count = this.firing.fireDue(now, limit);
          failpoint("shard.inFireChunk", this.name);
          return count;
        });
        sending.push(this.sendCommitted());
        fired += made;
        if (made < limit || fired >= TICK_BATCH) break;
        await nextTurn();
        failpoint("shard.betweenChunks", this.name);
      }
      this.alarmChange((now) => {
        this.ledger.advanceDue(now);
        this.outcomes.notifier.resendDue(now);
      });
      sending.push(this.sendCommitted());
    } catch (err) {
      // The sends already started end before the alarm fails. A chunk that threw took its
      // dispatches with it; any committed and not yet sent wait in memory for the retry.
      await Promise.allSettled(sending);
      throw err;
    }
    // Whoever starts a flush re-arms the alarm once it ends (dispatch.ts, `flush`): here that
    // is `settle`, so it comes after the sends this alarm started.
    await Promise.all(sending);
    await this.settle();
    // After the due work, never before it: a pass is bounded and re-arms for what is left.
    if (await this.retention.pass(Date.now())) await this.armAlarm();
  }

  /** One of the alarm's transactions, charged to the alarm even after an await (meter.ts, `during`). */
  private alarmChange<T>(apply: (now: number) => T): T {
    const result = this.meter.during(ALARM, () => this.change(apply));
    failpoint("shard.afterCommit", this.name);
    return result;
  }

  /** Starts sending what the alarm committed; the statements of sending are `settle`'s, as after any change. */
  private sendCommitted(): Promise<void> {
    return this.dispatcher.unsentCount() === 0 ? Promise.resolve() : this.meter.during(SETTLE, () => this.dispatcher.flush());
  }

  // ---- RPC: jobs and tenants ----

  async applyJobs(definitions: JobDefinition[], tenants: TenantSettings[] = []): Promise<JobRuntime[]> {
    return this.metered("applyJobs", async (here) => {
      this.change((now) => {
        this.firing.applyJobs(definitions, tenants, now);
        this.retention.schedule(now);
      });
      await this.settle();
      return here(() => this.views.jobRuntimes(definitions.map((d) => d.id)));
    });
  }

  /** A raised runs-in-flight limit may let waiting runs start: they are looked at now. */
  async applyTenants(tenants: TenantSettings[]): Promise<void> {
    return this.metered("applyTenants", async () => {
      this.change((now) => {
        for (const tenant of tenants) this.store.putTenant(tenant);
        this.admitter.wakeAll(now);
      });
      await this.settle();
    });
  }

  /** Called by a tenant gate when capacity freed (and harmless at any other time). */
  async admitWaiting(): Promise<void> {
    return this.metered("admitWaiting", async () => {
      this.change((now) => this.admitter.wakeAll(now));
      await this.settle();
    });
  }

  async jobRuntimes(ids: string[]): Promise<JobRuntime[]> {
    return this.metered("jobRuntimes", async () => this.views.jobRuntimes(ids));
  }

  async trigger(jobId: string, by: TriggeredBy): Promise<Answer<RunView, "unknown_job" | "job_paused">> {
    return this.metered("trigger", async (here) => {
      const answer = this.change((now) => this.firing.trigger(jobId, by, now));
      if (!answer.ok) return answer;
      await this.settle();
      return here(() => done(this.views.run(answer.value)!));
    });
  }

  async backfill(jobId: string, from: number, to: number): Promise<Answer<BackfillResult, "unknown_job" | "job_paused" | "too_many">> {
    return this.metered("backfill", async () => {
      const answer = this.change((now) => this.firing.backfill(jobId, from, to, now));
      if (answer.ok) await this.settle();
      return answer;
    });
  }

  // ---- RPC: the consumer's side and long-running targets ----

  async open(dispatches: Dispatch[]): Promise<OpenResult[]> {
    return this.metered("open", async () => this.completions.open(dispatches));
  }

  async report(outcomes: Outcome[]): Promise<Array<"recorded" | "stale">> {
    return this.metered("report", async () => {
      const results = this.change((now) => this.completions.report(outcomes, now));
      await this.settle();
      return results;
    });
  }

  async complete(runId: string, token: string, completion: Completion): Promise<Answer<RunView, TokenRefusal>> {
    return this.metered("complete", async (here) => {
      const answer = this.change((now) => this.completions.complete(runId, token, completion, now));
      if (!answer.ok) return answer;
      await this.settle();
      return here(() => done(this.views.run(runId)!));
    });
  }

  async heartbeat(runId: string, token: string, extendMs: number): Promise<Answer<{ leaseUntil: number }, TokenRefusal>> {
    return this.metered("heartbeat", async () => {
      const answer = this.change((now) => this.completions.heartbeat(runId, token, extendMs, now));
      if (answer.ok) await this.settle();
      return answer;
    });
  }

  async holdDispatches(holds: Array<Dispatch & { until: number; reason: string }>): Promise<Array<"held" | "stale">> {
    return this.metered("holdDispatches", async () => {
      const results = this.change((now) => this.completions.hold(holds, now));
      await this.settle();
      return results;
    });
  }

  async notificationsDelivered(ids: string[]): Promise<void> {
    return this.metered("notificationsDelivered", async () => {
      this.change(() => this.outcomes.notifier.delivered(ids));
    });
  }

  async abandonDispatches(dispatches: Dispatch[]): Promise<Array<"redispatched" | "stale">> {
    return this.metered("abandonDispatches", async () => {
      const results = this.change((now) => this.completions.abandon(dispatches, now));
      await this.settle();
      return results;
    });
  }

  // ---- RPC: dead letters ----

  /** Gives a dead or failed run of a live job a fresh set of attempts. */
  async retryRun(runId: string): Promise<Answer<RunView, "unknown_run" | "not_retryable">> {
    return this.metered("retryRun", async (here) => {
      const answer = this.change((now) => this.workflows.revive(runId, now));
      if (!answer.ok) return answer;
      await this.settle();
      return here(() => done(this.views.run(runId)!));
    });
  }

  // ---- RPC: reads ----

  async getRun(runId: string): Promise<RunView | null> {
    return this.metered("getRun", async () => this.views.run(runId));
  }

  async listRuns(jobId: string, limit: number, before?: { scheduledAt: number; id: string }): Promise<RunView[]> {
    return this.metered("listRuns", async () => this.views.runs(jobId, limit, before));
  }

  async deadLetters(
    scope: { tenantId: string | null; jobId: string | null },
    limit: number,
    before?: { finishedAt: number; id: string },
  ): Promise<RunView[]> {
    return this.metered("deadLetters", async () => this.views.deadLetters(scope, limit, before));
  }

  /** The meter's tally is written first, so the window holds everything counted until now. */
  async metrics(windowMs: number, tenantId: string | null = null): Promise<ShardMetrics> {
    return this.metered("metrics", async () => {
      const now = Date.now();
      return {
        ...this.views.metrics(windowMs, tenantId, now),
        outbox: this.dispatcher.unsentCount(tenantId),
        ...this.meter.window(now - windowMs, now),
        archive: this.retention.archiveHealth(),
      };
    });
  }

  // ---- RPC: the sweep ----

  async compareJobs(entries: CatalogEntry[]): Promise<JobComparison> {
    return this.metered("compareJobs", async () => this.views.compareJobs(entries));
  }

  /**
   * Alarms can be lost or late (a workerd bug can leave a SQLite object's alarm late), so the
   * sweep calls this: work already due runs now, otherwise the alarm is set again.
   */
  async assertAlarm(): Promise<{ ranDueWork: boolean; alarmAt: number | null }> {
    return this.metered("assertAlarm", async () => {
      const now = Date.now();
      const due = this.nextDue(now);
      const ranDueWork = due !== null && due <= now;
      if (ranDueWork) await this.runAlarm();
      else await this.armAlarm();
      return { ranDueWork, alarmAt: await this.ctx.storage.getAlarm() };
    });
  }

  // ---- the one change, the one settle, the meter ----

  /**
   * One invocation (an RPC call or the alarm: one billed request) as `operation`: its
   * synchronous part, and whatever it wraps in `here`, is charged to it; the rest to `settle`.
   * What it counted is written once, at its end.
   */
  private async metered<T>(operation: string, work: (here: <R>(part: () => R) => R) => Promise<T>): Promise<T> {
    this.refuseIfTooNew();
    this.meter.count("calls", 1, operation);
    try {
      return await this.meter.during(operation, () => work((part) => this.meter.during(operation, part)));
    } finally {
      // An object left idle may be evicted, and its unwritten tally with it: when nothing is
      // due soon, the tally is written now; a busy shard writes it every few seconds.
      const now = Date.now();
      const due = this.nextDue(now);
      this.meter.persist(now, due === null || due > now + IDLE_AFTER_MS);
    }
  }

  /** Before anything is read or written (the meter's tally included): storage newer than the code is not touched. */
  private refuseIfTooNew(): void {
    if (this.refusal) throw this.refusal;
  }

  /** One atomic change of the shard's state: the single writer's transaction; dispatches it made go with it if it throws. */
  private change<T>(apply: (now: number) => T): T {
    const mark = this.dispatcher.mark();
    const notifications = this.outcomes.notifier.mark();
    try {
      return this.meter.inChange(() =>
        this.ctx.storage.transactionSync(() => {
          const result = apply(Date.now());
          // The leases the change took are written with it (leases.ts).
          this.store.leases.write();
          return result;
        }),
      );
    } catch (err) {
      this.dispatcher.rollBack(mark);
      this.outcomes.notifier.rollBack(notifications);
      this.store.forgetKept();
      throw err;
    }
  }

  /**
   * After every change: buffered fires whose turn came start, waiting runs are admitted, jobs
   * whose failures in a row reached their limit are paused, what was committed is sent, and the
   * alarm is pointed at the earliest remaining work.
   */
  private settle(): Promise<void> {
    return this.meter.during(SETTLE, () => this.settleNow());
  }

  private async settleNow(): Promise<void> {
    this.change((now) => this.firing.startBuffered(now));
    await this.admitter.admit();
    await this.outcomes.autoPause.flush();
    await Promise.all([this.dispatcher.flush(), this.outcomes.notifier.flush()]);
    await this.armAlarm();
  }

  /** The earliest thing any capability has to do (admission's and completion's waits are runs' due times). */
  private nextDue(now: number): number | null {
    const times = [
      this.firing.nextDue(),
      this.ledger.nextDue(),
      this.dispatcher.nextDue(now),
      this.outcomes.notifier.nextDue(now),
      this.retention.nextDue(),
    ].filter((t) => t !== null);
    return times.length === 0 ? null : Math.min(...times);
  }

  private async armAlarm(): Promise<void> {
    const at = this.nextDue(Date.now());
    const current = await this.ctx.storage.getAlarm();
    // Before the write: an alarm set for a time already past may start before the write returns.
    this.meter.alarmSet(at, Date.now());
    if (at === null) {
      if (current !== null) await this.ctx.storage.deleteAlarm();
    } else if (current !== at) {
      await this.ctx.storage.setAlarm(at);
    }
  }

  /**
   * The shard's own name (every shard is reached through `idFromName`), for the dispatches it
   * sends and the completion tokens it issues; faults armed for one shard name it too.
   */
  private get name(): string {
    const name = this.ctx.id.name;
    if (name === undefined) throw new Error("a shard must be reached by name (idFromName)");
    return name;
  }
}

/** A turn of the event loop: a send just started goes out, and calls waiting on the shard run. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}
