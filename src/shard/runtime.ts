import { config } from "../config";
import { countingStub } from "../cost/counting-stub";
import type { QueueMessage } from "../protocol/queue-messages";
import { dispatchQueue } from "../queues";
import { gateStub } from "../stubs";
import { makeCapabilities, type ShardCapabilities } from "./capabilities";
import type { PermitGate, PermitKeeper, ShardHost } from "./host";
import { SETTLE, ShardMeter } from "./meter";
import { migrateShard, ShardSchemaTooNew } from "./migrations";

/** A shard with nothing due within this long counts as going idle (see `metered`). */
const IDLE_AFTER_MS = 5_000;

/**
 * The shard's host (host.ts) and the steps every invocation takes around its capabilities. An
 * RPC call passes two layers, each once:
 *
 * - `metered`: one invocation (one billed request), as its operation: refused if the storage is
 *   newer than the code, its call counted, its synchronous part (and what it wraps in `here`)
 *   charged to it, its tally written at its end;
 * - `change`: one atomic change of the shard's state, the single writer's transaction. What it
 *   counts (meter, counters), sends (dispatches, notifications) and leases stands only if it
 *   commits.
 *
 * Then `settle`, charged to `settle`, which makes changes of its own. The alarm is an invocation
 * too (shard.ts), whose transactions are charged to it.
 */
export class ShardRuntime implements ShardHost {
  readonly meter: ShardMeter;
  readonly sql: Pick<SqlStorage, "exec">;
  readonly parts: ShardCapabilities;
  /** Set when the storage is newer than this code: every call and the alarm throw it, and nothing is written. */
  private readonly refusal: ShardSchemaTooNew | null = null;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly env: Env,
  ) {
    // One transaction: a shard an earlier release created is upgraded all at once or not at all.
    try {
      ctx.storage.transactionSync(() => migrateShard(ctx.storage.sql));
    } catch (err) {
      if (!(err instanceof ShardSchemaTooNew)) throw err;
      // Logged once per instance, not per call; the calls' own errors say it each time.
      console.error(`shard ${ctx.id.name ?? ctx.id.toString()}: ${err.message}`);
      this.refusal = err;
    }
    this.meter = new ShardMeter(ctx.storage.sql);
    this.sql = this.meter.sql;
    // This design's leader election: a new instance becomes the shard's single writer (created,
    // or again after an eviction, a restart or a deploy).
    this.meter.countStart();
    this.parts = makeCapabilities(this, (env as Partial<Env>).ARCHIVE);
  }

  // ---- the host's members, the one place each setting and binding is read ----

  name(): string {
    const name = this.ctx.id.name;
    if (name === undefined) throw new Error("a shard must be reached by name (idFromName)");
    return name;
  }

  claimTimeoutMs(): number {
    return config(this.env).claimTimeoutMs;
  }

  gateOf(tenantId: string): PermitGate & PermitKeeper {
    return countingStub(gateStub(this.env, tenantId), () => this.meter.count("gateRequests"));
  }

  queueOf(shard: string): Queue<QueueMessage> {
    return dispatchQueue(this.env, shard);
  }

  catalog(): D1Database {
    return this.env.DB;
  }

  change<T>(apply: (now: number) => T): T {
    const { dispatcher, outcomes, store } = this.parts;
    const dispatches = dispatcher.mark();
    const notifications = outcomes.notifier.mark();
    const releases = store.permitReleases.mark();
    this.meter.beginChange();
    try {
      const result = this.ctx.storage.transactionSync(() => {
        const result = apply(Date.now());
        // The leases the change took are written with it (leases.ts).
        store.leases.write();
        return result;
      });
      this.meter.endChange(true);
      return result;
    } catch (err) {
      this.meter.endChange(false);
      dispatcher.rollBack(dispatches);
      outcomes.notifier.rollBack(notifications);
      store.permitReleases.rollBack(releases);
      store.forgetKept();
      throw err;
    }
  }

  // ---- the invocation, the one settle, the alarm's time ----

  /** One invocation as `operation` (see the class): what it counted is written once, at its end. */
  async metered<T>(operation: string, work: (here: <R>(part: () => R) => R) => Promise<T>): Promise<T> {
    this.refuseIfTooNew();
    this.meter.count("calls", 1, operation);
    this.armedFor = undefined;
    try {
      return await this.meter.during(operation, () => work((part) => this.meter.during(operation, part)));
    } finally {
      // An object left idle may be evicted, and its unwritten tally with it: when nothing is
      // due soon, the tally is written now; a busy shard writes it every few seconds. The time
      // the call's settle armed the alarm for is what is due (asked again only where it did not
      // settle): it decides only when the meter writes, so one a later call moved is no harm.
      const now = Date.now();
      const due = this.armedFor !== undefined ? this.armedFor : this.nextDue(now);
      this.meter.persist(now, due === null || due > now + IDLE_AFTER_MS);
    }
  }

  /** Before anything is read or written (the meter's tally included): storage newer than the code is not touched. */
  refuseIfTooNew(): void {
    if (this.refusal) throw this.refusal;
  }

  /**
   * After every change: buffered fires whose turn came start, waiting runs are admitted, jobs
   * whose failures in a row reached their limit are paused, what was committed is sent, and the
   * alarm is pointed at the earliest remaining work.
   */
  settle(): Promise<void> {
    return this.meter.during(SETTLE, () => this.settleNow());
  }

  private async settleNow(): Promise<void> {
    const { firing, admitter, outcomes, dispatcher } = this.parts;
    this.change((now) => firing.startBuffered(now));
    await admitter.admit();
    await outcomes.autoPause.flush();
    await Promise.all([dispatcher.flush(), outcomes.notifier.flush()]);
    await this.armAlarm();
  }

  /** The earliest thing any capability has to do (admission's and completion's waits are runs' due times). */
  nextDue(now: number): number | null {
    const { firing, ledger, admitter, dispatcher, outcomes, retention } = this.parts;
    const times = [
      firing.nextDue(),
      ledger.nextDue(),
      admitter.nextDue(now),
      dispatcher.nextDue(now),
      outcomes.notifier.nextDue(now),
      retention.nextDue(),
    ].filter((t) => t !== null);
    return times.length === 0 ? null : Math.min(...times);
  }

  /** When the last `armAlarm` of the call under way pointed the alarm (undefined: it has not armed it). */
  private armedFor: number | null | undefined;

  async armAlarm(): Promise<void> {
    const at = this.nextDue(Date.now());
    this.armedFor = at;
    const current = await this.ctx.storage.getAlarm();
    // Before the write: an alarm set for a time already past may start before the write returns.
    this.meter.alarmSet(at, Date.now());
    if (at === null) {
      if (current !== null) await this.ctx.storage.deleteAlarm();
    } else if (current !== at) {
      this.meter.alarmWritten();
      await this.ctx.storage.setAlarm(at);
    }
  }
}
