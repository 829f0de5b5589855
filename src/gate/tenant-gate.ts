import { DurableObject } from "cloudflare:workers";
import { shardsInUseAfter } from "../catalog/shards";
import type { GroupLimits } from "../model/flow-control";
import { jobIdsFrom } from "../model/ids";
import { shardStub } from "../stubs";
import type { GateAnswer } from "./blocks";
import { type Breaker, type BreakerVerdict, check, closedBreaker, record, storedBreaker } from "./breaker";
import { GATE_COST_SCHEMA, type GateCost, GateMeter } from "./gate-meter";
import { decideGrants, type PermitAsk } from "./grants";
import { GROUP_SCHEMA, GroupPermits } from "./group-permits";
import type { JobCount, RoomAnswer } from "./job-count";
import { JOB_ROOM_SCHEMA, JobRoom } from "./job-room";
import {
  decideReserve,
  giveBack,
  type MessageCount,
  RECOUNT_CONCURRENCY,
  RECOUNT_SHARDS_PER_STEP,
  RECOUNT_STEP_BUDGET_MS,
  recountFailed,
  recountFinished,
  recountProgressed,
  UNCOUNTED,
  type Verdict,
} from "./message-quota";
import { parsePermitKey } from "./permit-keys";
import { type Bucket, takeTokens } from "./request-bucket";
import { TenantPermits } from "./tenant-permits";

/**
 * One per tenant: the single place that counts a tenant's runs in flight over all its shards,
 * and its API request rate. Shards ask it for permits before dispatching a run of a tenant that
 * has a `maxRunsInFlight`; a permit is held until the shard releases it (the attempt ended) or
 * its lease runs out (a shard that crashed before releasing cannot leak capacity for ever).
 * A shard that got fewer permits than it asked for is remembered and woken when capacity
 * frees, so waiting runs start as others finish, with no polling. It also keeps the tenant's
 * circuit breakers, one per target origin (breaker.ts): every consumer asks it before calling.
 * Flow-control groups (a job's `flowControl`, a QStash queue) are counted here too, with
 * permits of their own in the same grant (group-permits.ts): a run takes every permit it needs
 * in one call, or none. And it counts the tenant's live QStash messages against its
 * `maxLiveMessages` (message-quota.ts): a row written per publish, none per run, and its alarm
 * recounts them from the tenant's shards, so that no publish waits on them.
 */
export class TenantGate extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  /** The API token bucket lives in memory: losing it on eviction only forgives a burst. */
  private bucket: Bucket = { tokens: 0, at: 0 };
  private readonly groups: GroupPermits;
  private readonly meter: GateMeter;
  private readonly permits: TenantPermits;
  private readonly jobRoom: JobRoom;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.meter = new GateMeter(ctx.storage.sql);
    this.sql = this.meter.sql;
    ctx.storage.transactionSync(() => permitsWithoutRowid(ctx.storage.sql));
    this.sql.exec(`
      ${PERMITS_SCHEMA}
      ${GATE_COST_SCHEMA}
      CREATE TABLE IF NOT EXISTS waiters (shard TEXT PRIMARY KEY, wanted INTEGER NOT NULL, since INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS breakers (origin TEXT PRIMARY KEY, state TEXT NOT NULL) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS breaker_transitions (to_state TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS message_count (one INTEGER PRIMARY KEY CHECK (one = 1), state TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS gate_tenant (one INTEGER PRIMARY KEY CHECK (one = 1), tenant_id TEXT NOT NULL);
      ${JOB_ROOM_SCHEMA}
    ${GROUP_SCHEMA}`);
    this.groups = new GroupPermits(this.sql);
    this.permits = new TenantPermits(this.sql);
    this.jobRoom = new JobRoom(this.sql, env.DB, (work) => ctx.waitUntil(work));
  }

  /** A block of up to `want` API requests from the tenant's bucket of `perSecond` (request-bucket.ts), for an isolate to spend. */
  async takeRequests(perSecond: number, want: number): Promise<GateAnswer> {
    this.meter.begin("takeRequests");
    const { bucket, answer } = takeTokens(this.bucket, perSecond, want, Date.now());
    this.bucket = bucket;
    return answer;
  }

  // ---- live jobs under maxJobs (job-room.ts) ----

  /** Room for `need` of the tenant's jobs, and up to `want` for the isolate to spend (JobRoom.take). */
  async takeJobRoom(...args: Parameters<JobRoom["take"]>): Promise<RoomAnswer | { unavailable: string }> {
    this.meter.begin("takeJobRoom");
    return this.jobRoom.take(...args);
  }

  /** The tenant's quota changed: counted again now, so that the leases granted before no longer insert. */
  async quotaChanged(tenantId: string, maxJobs: number, tenantVersion: number): Promise<void> {
    this.meter.begin("quotaChanged");
    await this.jobRoom.quotaChanged(tenantId, maxJobs, tenantVersion);
  }

  /** Places of jobs deleted at `deletedAts` (each live when deleted), given back. */
  async giveBackJobs(deletedAts: number[]): Promise<void> {
    this.meter.begin("giveBackJobs");
    this.jobRoom.giveBack(deletedAts);
  }

  /** Live jobs as the gate counts them; null: never counted. */
  async liveJobs(): Promise<JobCount | null> {
    this.meter.begin("liveJobs");
    return this.jobRoom.count();
  }

  // ---- live QStash messages (message-quota.ts): one row, the count as JSON ----

  /**
   * Reserves `n` messages of `tenantId` (this gate's) made at `madeAt` (their ids' time) under
   * `limit`, on the count as it stands; a recount it begins is the alarm's, now. Refused: how
   * long to wait before asking again.
   */
  async reserveMessages(
    tenantId: string,
    n: number,
    madeAt: number,
    limit: number,
  ): Promise<{ verdict: Verdict; live: number; retryAfterMs: number }> {
    this.meter.begin("reserveMessages");
    const { verdict, next, recountBegun, retryAfterMs } = decideReserve(this.messageCount(), n, madeAt, limit, Date.now());
    this.saveMessageCount(next);
    if (recountBegun) {
      // The gate is named by its tenant's id, which an alarm is not told: kept for the recount.
      this.sql.exec(
        "INSERT INTO gate_tenant (one, tenant_id) VALUES (1, ?) ON CONFLICT (one) DO UPDATE SET tenant_id = excluded.tenant_id",
        tenantId,
      );
    }
    await this.armAlarm();
    return { verdict, live: next.live, retryAfterMs };
  }

  /** Messages reserved and not made after all (their publish failed): given back. */
  async giveBackMessages(n: number, madeAt: number): Promise<void> {
    this.meter.begin("giveBackMessages");
    this.saveMessageCount(giveBack(this.messageCount(), n, madeAt));
    await this.armAlarm();
  }

  private messageCount(): MessageCount {
    const row = this.sql.exec("SELECT state FROM message_count").toArray()[0];
    // Fields a count stored before they existed are theirs by default.
    return row ? { ...UNCOUNTED, ...(JSON.parse(row.state as string) as Partial<MessageCount>) } : UNCOUNTED;
  }

  private saveMessageCount(count: MessageCount): void {
    this.sql.exec(
      "INSERT INTO message_count (one, state) VALUES (1, ?) ON CONFLICT (one) DO UPDATE SET state = excluded.state",
      JSON.stringify(count),
    );
  }

  /**
   * Grants what each asked run needs: its tenant permit (when `tenant`, under `tenantLimit`) and
   * its group's (under the group's parallelism and rate), all or none per run, in order. A shard
   * refused for parallelism or the tenant's limit is woken when a place frees; one refused for a
   * rate is told when the group's next window opens (`retryAt`), and asks again then itself.
   * `alsoWaiting`: the shard's runs of this tenant it did not ask for (it asks for no more than
   * the limit), counted in what it wants when refused, so that a wake-up offers it enough places.
   * `tenantRefused`: how many the tenant's limit refused (the shard parks them until woken).
   */
  async admit(
    shard: string,
    asks: PermitAsk[],
    tenantLimit: number | null,
    leaseMs: number,
    alsoWaiting = 0,
  ): Promise<{ granted: string[]; retryAt: Record<string, number>; tenantRefused: number }> {
    this.meter.begin("admit");
    const now = Date.now();
    let granted: string[] = [];
    let tenantRefused = 0;
    const retryAt: Record<string, number> = {};
    this.transaction(() => {
      this.permits.expire(now);
      this.groups.expire(now);
      const held = this.permits.held(asks.filter((a) => a.tenant).map((a) => a.permit));
      const grouped = asks.filter((a) => a.group).map((a) => a.permit);
      const groupHeld = this.groups.held(grouped);
      // Held means held of everything it needs; a repeated ask takes again what lapsed.
      const allHeld = new Set(
        asks.filter((a) => (!a.tenant || held.has(a.permit)) && (!a.group || groupHeld.has(a.permit))).map((a) => a.permit),
      );
      const tenantFree = tenantLimit === null ? Number.POSITIVE_INFINITY : tenantLimit - this.permits.count();
      const before = this.groups.states(new Set(asks.flatMap((a) => (a.group ? [a.group.key] : []))));
      const d = decideGrants(asks, allHeld, tenantFree, before, now);
      const byPermit = new Map(asks.map((a) => [a.permit, a]));
      const until = now + leaseMs;
      for (const permit of d.granted) if (byPermit.get(permit)!.tenant) this.permits.take(permit, shard, until, held.has(permit));
      const taken = d.granted.flatMap((permit) => {
        const group = byPermit.get(permit)!.group;
        return group ? [{ permit, group: group.key }] : [];
      });
      this.groups.apply(shard, taken, d, before, until, now);
      if (d.tenantRefused > 0)
        this.sql.exec(
          "INSERT INTO waiters (shard, wanted, since) VALUES (?, ?, ?) ON CONFLICT (shard) DO UPDATE SET wanted = excluded.wanted",
          shard,
          d.tenantRefused + alsoWaiting,
          now,
        );
      granted = d.granted;
      tenantRefused = d.tenantRefused;
      for (const [grp, at] of d.retryAt) retryAt[grp] = at;
    });
    await this.armAlarm();
    return { granted, retryAt, tenantRefused };
  }

  /** One change of the gate's storage; rolled back, the permits' summary in memory is read again. */
  private transaction(change: () => void): void {
    try {
      this.ctx.storage.transactionSync(change);
    } catch (err) {
      this.permits.forget();
      throw err;
    }
  }

  /** Limits for a group itself (a QStash queue's parallelism), over what its jobs state; null: theirs again. Waiting shards are woken to use them. */
  async setGroupLimits(group: string, limits: GroupLimits | null): Promise<void> {
    this.meter.begin("setGroupLimits");
    this.groups.setLimits(group, limits);
    this.wakeGroup(group, Number.MAX_SAFE_INTEGER);
    await this.armAlarm();
  }

  /** Each group's runs in flight, and its runs waiting as their shards last said. */
  async groupFigures(groups: string[]): Promise<Record<string, { inFlight: number; waiting: number }>> {
    this.meter.begin("groupFigures");
    return this.groups.figures(groups);
  }

  // ---- circuit breakers: a row per origin that ever failed, the whole breaker as JSON ----

  /**
   * Runs that want to call these origins now (one caller each: `callerOf`): which of each may,
   * and until when the rest wait. A breaker's row is written only when the check changes it.
   */
  async checkBreakers(asks: Array<{ origin: string; callers: string[] }>): Promise<Record<string, Omit<BreakerVerdict, "breaker">>> {
    this.meter.begin("checkBreakers");
    const now = Date.now();
    const answers: Record<string, Omit<BreakerVerdict, "breaker">> = {};
    this.ctx.storage.transactionSync(() => {
      const moves = new Map<string, number>();
      for (const { origin, callers } of asks) {
        const before = this.breaker(origin);
        const { breaker, ...answer } = check(before, callers, now);
        if (breaker !== before) this.saveBreaker(breaker);
        noteMove(moves, before, breaker);
        answers[origin] = answer;
      }
      this.countMoves(moves);
    });
    await this.armAlarm();
    return answers;
  }

  /**
   * Attempts' outcomes against their origins, in order, each by its caller (ok: the origin is
   * up; false: down; null: says nothing of its health, as `originHealth` decides).
   */
  async recordOutcomes(outcomes: Array<{ origin: string; ok: boolean | null; caller: string }>): Promise<void> {
    this.meter.begin("recordOutcomes");
    const now = Date.now();
    // Each origin read once and written once per call, however many outcomes a batch brings.
    const read = new Map<string, Breaker>();
    const changed = new Map<string, Breaker>();
    // Every move counts, though only the last state of each origin is written.
    const moves = new Map<string, number>();
    for (const { origin, ok, caller } of outcomes) {
      const before = changed.get(origin) ?? read.get(origin) ?? this.breaker(origin);
      read.set(origin, before);
      const after = record(before, ok, now, caller);
      if (after !== before) changed.set(origin, after);
      noteMove(moves, before, after);
    }
    if (changed.size > 0)
      this.ctx.storage.transactionSync(() => {
        for (const b of changed.values()) this.saveBreaker(b);
        this.countMoves(moves);
      });
    await this.armAlarm();
  }

  /** The tenant's breakers that are not plainly closed (open, half-open, or counting failures). */
  async breakers(): Promise<Breaker[]> {
    this.meter.begin("breakers");
    return this.openBreakers();
  }

  /**
   * The breakers, and how often one moved to each state since the gate was created: a counter
   * GET /metrics serves (edgecron_breaker_transitions_total), kept in the gate's storage.
   */
  async breakerFigures(): Promise<{ breakers: Breaker[]; transitions: Record<string, number> }> {
    this.meter.begin("breakerFigures");
    const transitions: Record<string, number> = {};
    for (const r of this.sql.exec("SELECT to_state, n FROM breaker_transitions").toArray())
      transitions[r.to_state as string] = r.n as number;
    return { breakers: this.openBreakers(), transitions };
  }

  private openBreakers(): Breaker[] {
    return this.sql
      .exec("SELECT origin, state FROM breakers ORDER BY origin")
      .toArray()
      .map((r) => storedBreaker(r.origin as string, r.state as string));
  }

  /** A row per state moved to, in the change's transaction: moves are rare (failures in a row of several jobs open a breaker). */
  private countMoves(moves: Map<string, number>): void {
    for (const [to, n] of moves)
      this.sql.exec(
        "INSERT INTO breaker_transitions (to_state, n) VALUES (?, ?) ON CONFLICT (to_state) DO UPDATE SET n = n + excluded.n",
        to,
        n,
      );
  }

  private breaker(origin: string): Breaker {
    const row = this.sql.exec("SELECT state FROM breakers WHERE origin = ?", origin).toArray()[0];
    return row ? storedBreaker(origin, row.state as string) : closedBreaker(origin);
  }

  /** A breaker back to closed with no failures is the default: its row goes. */
  private saveBreaker(b: Breaker): void {
    if (b.state === "closed" && b.failures === 0) this.sql.exec("DELETE FROM breakers WHERE origin = ?", b.origin);
    else
      this.sql.exec(
        "INSERT INTO breakers (origin, state) VALUES (?, ?) ON CONFLICT (origin) DO UPDATE SET state = excluded.state",
        b.origin,
        JSON.stringify(b),
      );
  }

  /**
   * Extends permits still held (a long-running attempt heartbeats or answered 202; a workflow's
   * step is dispatched). A resend of a run's own permit does not come here: it asks `admit`,
   * which takes a lapsed permit again only where there is room (docs/architecture.md, invariant 10).
   */
  async renew(permits: string[], leaseMs: number, shard = ""): Promise<void> {
    this.meter.begin("renew");
    const until = Date.now() + leaseMs;
    // A permit whose lease ran out before its renewal came (the renewal was lost with a shard's
    // memory, or failed) is taken again: its run is still in flight, so it counts again, and the
    // tenant's limit holds for new admissions from here on. Its key says what it holds.
    for (const permit of permits) {
      const { tenant, group } = parsePermitKey(permit);
      if (group !== null) this.groups.renew(permit, group, shard, until);
      if (tenant) this.permits.renew(permit, shard, until);
    }
    await this.armAlarm();
  }

  /** Gives permits back; waiting shards are woken to use the freed capacity. */
  async release(permits: string[]): Promise<void> {
    this.meter.begin("release");
    let freed = 0;
    const groupsFreed = new Map<string, number>();
    for (const permit of permits) {
      const { tenant, group } = parsePermitKey(permit);
      if (tenant && this.permits.release(permit)) freed++;
      const grp = group === null ? null : this.groups.release(permit);
      if (grp !== null) groupsFreed.set(grp, (groupsFreed.get(grp) ?? 0) + 1);
    }
    this.wakeWaiters(freed);
    for (const [grp, n] of groupsFreed) this.wakeGroup(grp, n);
    await this.armAlarm();
  }

  /**
   * Permits whose lease ran out are dropped, and their capacity handed on; and the recount of
   * live messages, if one is due, takes a step. (An alarm that was the recount's alone may wake
   * one waiting shard for nothing: it asks again, and waits again.)
   */
  override async alarm(): Promise<void> {
    this.meter.begin("alarm");
    this.expirePermits();
    await this.recountStep();
    // What the meter counted is written now: an alarm that was the meter's alone sets no other.
    this.meter.persist(Date.now(), true);
    await this.armAlarm();
  }

  private expirePermits(): void {
    const freed = this.permits.expire(Date.now());
    this.wakeWaiters(Math.max(1, freed));
    const groupsFreed = this.groups.expire(Date.now());
    // A group whose waiters lost their wake-up is looked at too: one place each, as for the tenant's.
    for (const grp of this.groups.waitingGroups()) this.wakeGroup(grp, Math.max(1, groupsFreed.get(grp) ?? 0));
  }

  /**
   * One step of the recount under way, if due: the next of the tenant's shards (in name order,
   * from where the last step stopped) asked RECOUNT_CONCURRENCY at a time, each counting the
   * messages made before the recount began, until RECOUNT_SHARDS_PER_STEP or the time budget;
   * the progress is saved after each batch, so a step that dies is taken up where it was.
   * Publishes go on meanwhile (the gate is not held while shards answer): each save re-reads.
   */
  private async recountStep(): Promise<void> {
    const start = Date.now();
    const recount = this.messageCount().recount;
    if (recount === null || recount.dueAt > start) return;
    const { from } = recount;
    const tenantId = this.sql.exec("SELECT tenant_id FROM gate_tenant").toArray()[0]?.tenant_id as string | undefined;
    if (tenantId === undefined) {
      // Cannot be: whatever begins a recount names the tenant. Dropped rather than tried for ever.
      console.error("tenant gate: a recount of live messages with no tenant named, dropped");
      this.saveMessageCount({ ...this.messageCount(), recount: null, sinceRecount: 0 });
      return;
    }
    const madeBefore = jobIdsFrom(from);
    try {
      const shards = await shardsInUseAfter(this.env.DB, tenantId, recount.after, RECOUNT_SHARDS_PER_STEP);
      for (let i = 0; i < shards.length; i += RECOUNT_CONCURRENCY) {
        const batch = shards.slice(i, i + RECOUNT_CONCURRENCY);
        const counts = await Promise.all(batch.map((shard) => shardStub(this.env, shard).countLiveMessages(tenantId, madeBefore)));
        const counted = counts.reduce((a, b) => a + b, 0);
        this.saveMessageCount(recountProgressed(this.messageCount(), from, batch.at(-1)!, counted, batch.length, Date.now()));
        if (Date.now() - start >= RECOUNT_STEP_BUDGET_MS && i + RECOUNT_CONCURRENCY < shards.length) return;
      }
      if (shards.length < RECOUNT_SHARDS_PER_STEP) this.saveMessageCount(recountFinished(this.messageCount(), from, Date.now()));
    } catch (err) {
      console.error(`tenant ${tenantId}: a step of the recount of its live messages failed, tried again later`, err);
      this.saveMessageCount(recountFailed(this.messageCount(), from, Date.now()));
    }
  }

  async inFlight(): Promise<number> {
    this.meter.begin("inFlight");
    return this.permits.count();
  }

  /**
   * Wakes the longest-waiting shards, as many as can use `freed` permits (by what each last
   * asked for), each told how many places it is offered, without awaiting them: a woken shard
   * reads that many of its parked runs and asks this gate for them (admitter.ts), so a freed
   * permit costs the shards rows for the runs it can start, not for every run waiting; refused,
   * it waits again. One whose wake is lost is re-checked by its own backstop. Waking every
   * waiter for every release would make each shard redo its admission for permits it cannot get.
   */
  private wakeWaiters(freed: number): void {
    const woken: Array<{ shard: string; places: number }> = [];
    let covered = 0;
    for (const row of this.sql.exec("SELECT shard, wanted FROM waiters ORDER BY since").toArray()) {
      if (covered >= freed) break;
      const places = Math.max(1, Math.min(row.wanted as number, freed - covered));
      woken.push({ shard: row.shard as string, places });
      covered += places;
    }
    if (woken.length === 0) return;
    for (const { shard } of woken) this.sql.exec("DELETE FROM waiters WHERE shard = ?", shard);
    const tenantId = this.ctx.id.name;
    if (tenantId === undefined) {
      this.wake(woken.map((w) => w.shard));
      return;
    }
    this.ctx.waitUntil(Promise.allSettled(woken.map(({ shard, places }) => shardStub(this.env, shard).admitWaiting(tenantId, places))));
  }

  /** Wakes the shards longest waiting for `group`, as many as can use `freed` places. */
  private wakeGroup(group: string, freed: number): void {
    this.wake(this.groups.takeWaiters(group, freed));
  }

  private wake(shards: string[]): void {
    if (shards.length === 0) return;
    this.ctx.waitUntil(Promise.allSettled(shards.map((shard) => shardStub(this.env, shard).admitWaiting())));
  }

  /** Permits need the alarm only while shards wait: then it is the earliest permit expiry, the tenant's or a group's. */
  private permitsAlarmAt(): number | null {
    const waiting = this.sql.exec("SELECT 1 FROM waiters LIMIT 1").toArray().length > 0 || this.groups.waitingGroups().length > 0;
    if (!waiting) return null;
    const tenantAt = this.permits.earliest();
    const groupAt = this.groups.earliestExpiry();
    return tenantAt === null ? groupAt : groupAt === null ? tenantAt : Math.min(tenantAt, groupAt);
  }

  /**
   * The alarm is the soonest of what permits need, the recount's next step and the meter's next
   * write of counts not yet written (an idle gate may be evicted, and its counts with it), if any
   * has a need.
   */
  private async armAlarm(): Promise<void> {
    const needs = [this.permitsAlarmAt(), this.messageCount().recount?.dueAt ?? null].filter((t) => t !== null);
    const meterAt = this.meter.writeDueAt();
    const times = meterAt === null ? needs : [...needs, meterAt];
    const at = times.length === 0 ? null : Math.min(...times);
    const metersOwn = needs.length === 0 || (meterAt !== null && meterAt < Math.min(...needs));
    if (at === null) await this.ctx.storage.deleteAlarm();
    else if ((await this.ctx.storage.getAlarm()) !== at) {
      this.meter.alarmWritten(metersOwn);
      await this.ctx.storage.setAlarm(at);
    }
  }

  /** What this gate's calls cost over the last `windowMs` (gate-meter.ts). */
  async cost(windowMs: number): Promise<GateCost> {
    const now = Date.now();
    return this.meter.window(now - windowMs, now);
  }
}

/**
 * A permit a row of its own, keyed by itself: `WITHOUT ROWID`, so that taking one writes one row,
 * not the row and its key's index (docs/cost.md).
 */
const PERMITS_SCHEMA =
  "CREATE TABLE IF NOT EXISTS permits (permit TEXT PRIMARY KEY, shard TEXT NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID;";

/** A gate made before permits were `WITHOUT ROWID` moves its permits into the new table, once. */
export function permitsWithoutRowid(sql: SqlStorage): void {
  const table = sql.exec("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'permits'").toArray()[0];
  if (!table || /WITHOUT ROWID/i.test(table.sql as string)) return;
  sql.exec(`ALTER TABLE permits RENAME TO permits_rowid;
    ${PERMITS_SCHEMA}
    INSERT INTO permits (permit, shard, expires_at) SELECT permit, shard, expires_at FROM permits_rowid;
    DROP TABLE permits_rowid;`);
}

/** A breaker that changed state between `before` and `after` adds one to the count of the state it moved to. */
function noteMove(moves: Map<string, number>, before: Breaker, after: Breaker): void {
  if (after.state !== before.state) moves.set(after.state, (moves.get(after.state) ?? 0) + 1);
}
