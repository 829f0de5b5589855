import { DurableObject } from "cloudflare:workers";
import { failpoint } from "../faults";
import type { Dispatch, LeaseToRenew, Outcome, RunOrder } from "../protocol/queue-messages";
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
import type { Admitter } from "./admitter";
import type { Completions } from "./completion";
import type { Dispatcher } from "./dispatch";
import { FIRE_CHUNK, type Firing } from "./firing";
import { type RunLedger, TICK_BATCH } from "./ledger";
import { ALARM, SETTLE, type ShardMeter } from "./meter";
import type { Outcomes } from "./outcomes";
import type { Retention } from "./retention";
import { ShardRuntime } from "./runtime";
import type { ShardStore } from "./store";
import type { Views } from "./views";
import type { Workflows } from "./workflows";

/**
 * One shard: the single writer of its jobs' runtime state (docs/architecture.md, invariant 1).
 * The class is the RPC surface and the alarm over its capabilities (made and wired in
 * capabilities.ts, hosted by runtime.ts): each RPC method is one invocation (`metered`) holding
 * one transaction over them (`change`), then `settle`; all timing goes through the one alarm,
 * pointed at the earliest thing any capability has to do. What each capability owns, and what it offers the alarm:
 * docs/architecture.md, "The shard's capabilities" (firing, ledger, admission, dispatch,
 * completion, outcomes, views, retention, the cost meter).
 */
export class Shard extends DurableObject<Env> implements ShardApi {
  /** The host of the capabilities, and each invocation's steps around them (runtime.ts). */
  private readonly runtime: ShardRuntime;
  private readonly meter: ShardMeter;
  private readonly store: ShardStore;
  private readonly ledger: RunLedger;
  private readonly firing: Firing;
  private readonly dispatcher: Dispatcher;
  private readonly completions: Completions;
  private readonly views: Views;
  private readonly retention: Retention;
  private readonly outcomes: Outcomes;
  private readonly workflows: Workflows;
  private readonly admitter: Admitter;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.runtime = new ShardRuntime(ctx, env);
    this.meter = this.runtime.meter;
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
    } = this.runtime.parts);
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
    this.runtime.refuseIfTooNew();
    this.meter.alarmStarted(Date.now(), info);
    return this.runtime.metered(ALARM, () => this.runAlarm());
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
    failpoint("shard.alarmStart", this.runtime.name());
    const sending: Promise<void>[] = [];
    try {
      // TICK_BATCH runs at most (a job's catch_up fires are many runs): what is left stays due, and the alarm comes again at once.
      for (let fired = 0; fired < TICK_BATCH; ) {
        const limit = Math.min(FIRE_CHUNK, TICK_BATCH - fired);
        // Only where a tenant has a limit: elsewhere no run waits for its tenant, and the due page is read once.
        const ahead = this.store.anyLimitedTenant()
          ? await this.admitter.grantAhead(this.meter.during(ALARM, () => this.firing.runsDue(Date.now(), limit)))
          : new Map<string, { permit: string; tenantId: string }>();
        const { work, more } = this.fireWithGrants(ahead, () =>
          this.alarmChange((now) => {
            const chunk = this.firing.fireDue(now, limit, fired === 0);
            failpoint("shard.inFireChunk", this.runtime.name());
            return chunk;
          }),
        );
        sending.push(this.sendCommitted());
        fired += work;
        if (!more || work === 0 || fired >= TICK_BATCH) break;
        await nextTurn();
        failpoint("shard.betweenChunks", this.runtime.name());
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
    await this.runtime.settle();
    // After the due work, never before it: a pass is bounded and re-arms for what is left.
    if (await this.retention.pass(Date.now())) await this.runtime.armAlarm();
  }

  /**
   * A fire with the permits granted ahead of it (`Admitter.grantAhead`): those its runs did not
   * take (a run that existed already, a job changed at the await, a fire that threw) go back to
   * their gates with the next flush. A run of a tenant with runs parked here is made parked
   * (`RunLedger.parkAtFire`).
   */
  private fireWithGrants<T>(ahead: Map<string, { permit: string; tenantId: string }>, fire: () => T): T {
    this.ledger.grantedAhead = new Map([...ahead].map(([runId, { permit }]) => [runId, permit]));
    this.ledger.parkAtFire = this.store.anyLimitedTenant() ? new Set(this.store.admission.waits().keys()) : new Set();
    try {
      return fire();
    } finally {
      this.ledger.parkAtFire = new Set();
      for (const runId of this.ledger.grantedAhead.keys()) {
        const { permit, tenantId } = ahead.get(runId)!;
        // A run made meanwhile by another way (a backfill at the await) and admitted holds the
        // same key: the grant only renewed its permit, which stays held.
        if (this.store.getRun(runId)?.permit !== permit) this.store.permitReleases.add(permit, tenantId);
      }
      this.ledger.grantedAhead = new Map();
    }
  }

  /** One of the alarm's transactions, charged to the alarm even after an await (meter.ts, `during`). */
  private alarmChange<T>(apply: (now: number) => T): T {
    const result = this.meter.during(ALARM, () => this.runtime.change(apply));
    failpoint("shard.afterCommit", this.runtime.name());
    return result;
  }

  /** Starts sending what the alarm committed; the statements of sending are `settle`'s, as after any change. */
  private sendCommitted(): Promise<void> {
    return this.dispatcher.unsentCount() === 0 ? Promise.resolve() : this.meter.during(SETTLE, () => this.dispatcher.flush());
  }

  // ---- RPC: jobs and tenants ----

  async applyJobs(definitions: JobDefinition[], tenants: TenantSettings[] = []): Promise<JobRuntime[]> {
    return this.runtime.metered("applyJobs", async (here) => {
      failpoint("shard.sweepCall", this.runtime.name());
      this.runtime.change((now) => {
        this.firing.applyJobs(definitions, tenants, now);
        this.retention.schedule(now);
      });
      await this.runtime.settle();
      return here(() => this.views.jobRuntimes(definitions.map((d) => d.id)));
    });
  }

  /** A raised runs-in-flight limit may let waiting runs start: they are looked at now. */
  async applyTenants(tenants: TenantSettings[]): Promise<void> {
    return this.runtime.metered("applyTenants", async () => {
      failpoint("shard.sweepCall", this.runtime.name());
      this.runtime.change((now) => {
        for (const tenant of tenants) this.store.putTenant(tenant);
        this.admitter.tenantsChanged(tenants, now);
      });
      await this.runtime.settle();
    });
  }

  /** Called by a tenant gate when capacity freed (and harmless at any other time): `places` for the tenant's parked runs. */
  async admitWaiting(tenantId?: string, places?: number): Promise<void> {
    return this.runtime.metered("admitWaiting", async () => {
      if (tenantId !== undefined) this.admitter.offer(tenantId, places ?? 1);
      else this.runtime.change((now) => this.admitter.wakeAll(now));
      await this.runtime.settle();
    });
  }

  async jobRuntimes(ids: string[]): Promise<JobRuntime[]> {
    return this.runtime.metered("jobRuntimes", async () => this.views.jobRuntimes(ids));
  }

  async standaloneJobs(ids: string[]): Promise<JobDefinition[]> {
    return this.runtime.metered("standaloneJobs", async () => this.views.standaloneJobs(ids));
  }

  async listStandaloneJobs(tenantId: string | null, limit: number, beforeId?: string): Promise<JobDefinition[]> {
    return this.runtime.metered("listStandaloneJobs", async () => this.views.listStandaloneJobs(tenantId, limit, beforeId ?? null));
  }

  /** The tenant's live QStash messages in this shard made before `madeBefore`: its gate's recount (src/gate/message-quota.ts). */
  async countLiveMessages(tenantId: string, madeBefore: string): Promise<number> {
    failpoint("shard.countLiveMessages", tenantId);
    return this.runtime.metered("countLiveMessages", async () => this.views.countLiveMessages(tenantId, madeBefore));
  }

  async trigger(jobId: string, by: TriggeredBy): Promise<Answer<RunView, "unknown_job" | "job_paused">> {
    return this.runtime.metered("trigger", async (here) => {
      const answer = this.runtime.change((now) => this.firing.trigger(jobId, by, now));
      if (!answer.ok) return answer;
      await this.runtime.settle();
      return here(() => done(this.views.run(answer.value)!));
    });
  }

  async backfill(jobId: string, from: number, to: number): Promise<Answer<BackfillResult, "unknown_job" | "job_paused" | "too_many">> {
    return this.runtime.metered("backfill", async () => {
      const answer = this.runtime.change((now) => this.firing.backfill(jobId, from, to, now));
      if (answer.ok) await this.runtime.settle();
      return answer;
    });
  }

  // ---- RPC: the consumer's side and long-running targets ----

  async open(dispatches: Array<Dispatch & { leaseUntil?: number }>): Promise<OpenResult[]> {
    return this.runtime.metered("open", async () => this.completions.open(dispatches));
  }

  async report(outcomes: Outcome[]): Promise<Array<"recorded" | "stale">> {
    return this.runtime.metered("report", async () => {
      const results = this.runtime.change((now) => this.completions.report(outcomes, now));
      await this.runtime.settle();
      return results;
    });
  }

  async complete(runId: string, token: string, completion: Completion): Promise<Answer<RunView, TokenRefusal>> {
    return this.runtime.metered("complete", async (here) => {
      const answer = this.runtime.change((now) => this.completions.complete(runId, token, completion, now));
      if (!answer.ok) return answer;
      await this.runtime.settle();
      return here(() => done(this.views.run(runId)!));
    });
  }

  async heartbeat(runId: string, token: string, extendMs: number): Promise<Answer<{ leaseUntil: number }, TokenRefusal>> {
    return this.runtime.metered("heartbeat", async () => {
      const answer = this.runtime.change((now) => this.completions.heartbeat(runId, token, extendMs, now));
      if (answer.ok) await this.runtime.settle();
      return answer;
    });
  }

  async renewLeases(leases: LeaseToRenew[]): Promise<Array<number | null>> {
    return this.runtime.metered("renewLeases", async () => {
      const answer = this.runtime.change((now) => this.completions.renewLeases(leases, now));
      await this.runtime.settle();
      return answer;
    });
  }

  async holdDispatches(holds: Array<Dispatch & { until: number; reason: string; giveUp?: boolean }>): Promise<Array<"held" | "stale">> {
    return this.runtime.metered("holdDispatches", async () => {
      const results = this.runtime.change((now) => this.completions.hold(holds, now));
      await this.runtime.settle();
      return results;
    });
  }

  async timedOutOrder(runId: string, fence: number): Promise<RunOrder | null> {
    return this.runtime.metered("timedOutOrder", async () => this.completions.timedOutOrder(runId, fence));
  }

  async notificationsDelivered(ids: string[]): Promise<void> {
    return this.runtime.metered("notificationsDelivered", async () => {
      this.runtime.change(() => this.outcomes.notifier.delivered(ids));
    });
  }

  async abandonDispatches(dispatches: Dispatch[]): Promise<Array<"redispatched" | "ended" | "stale">> {
    return this.runtime.metered("abandonDispatches", async () => {
      const results = this.runtime.change((now) => this.completions.abandon(dispatches, now));
      await this.runtime.settle();
      return results;
    });
  }

  // ---- RPC: dead letters ----

  /** Gives a dead or failed run of a live job a fresh set of attempts. */
  async retryRun(runId: string): Promise<Answer<RunView, "unknown_run" | "not_retryable">> {
    return this.runtime.metered("retryRun", async (here) => {
      const answer = this.runtime.change((now) => this.workflows.revive(runId, now));
      if (!answer.ok) return answer;
      await this.runtime.settle();
      return here(() => done(this.views.run(runId)!));
    });
  }

  // ---- RPC: reads ----

  async getRun(runId: string): Promise<RunView | null> {
    return this.runtime.metered("getRun", async () => this.views.run(runId));
  }

  async listRuns(jobId: string, limit: number, before?: { scheduledAt: number; id: string }): Promise<RunView[]> {
    return this.runtime.metered("listRuns", async () => this.views.runs(jobId, limit, before));
  }

  async deadLetters(
    scope: { tenantId: string | null; jobId: string | null },
    limit: number,
    before?: { finishedAt: number; id: string },
  ): Promise<RunView[]> {
    return this.runtime.metered("deadLetters", async () => this.views.deadLetters(scope, limit, before));
  }

  /** The meter's tally is written first, so the window holds everything counted until now. */
  async metrics(windowMs: number, tenantId: string | null = null): Promise<ShardMetrics> {
    return this.runtime.metered("metrics", async () => {
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
    return this.runtime.metered("compareJobs", async () => {
      failpoint("shard.sweepCall", this.runtime.name());
      return this.views.compareJobs(entries);
    });
  }

  /**
   * Alarms can be lost or late (a workerd bug can leave a SQLite object's alarm late), so the
   * sweep calls this: work already due runs now, otherwise the alarm is set again.
   */
  async assertAlarm(): Promise<{ ranDueWork: boolean; alarmAt: number | null }> {
    return this.runtime.metered("assertAlarm", async () => {
      failpoint("shard.sweepCall", this.runtime.name());
      const now = Date.now();
      const due = this.runtime.nextDue(now);
      const ranDueWork = due !== null && due <= now;
      if (ranDueWork) await this.runAlarm();
      else await this.runtime.armAlarm();
      return { ranDueWork, alarmAt: await this.ctx.storage.getAlarm() };
    });
  }
}

/** A turn of the event loop: a send just started goes out, and calls waiting on the shard run. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}
