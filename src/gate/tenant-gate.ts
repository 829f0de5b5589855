import { DurableObject } from "cloudflare:workers";
import { shardStub, type Env } from "../env";

/**
 * One per tenant: the single place that counts a tenant's runs in flight over all its shards,
 * and its API request rate. Shards ask it for permits before dispatching a run of a tenant that
 * has a `maxRunsInFlight`; a permit is held until the shard releases it (the attempt ended) or
 * its lease runs out (a shard that crashed before releasing cannot leak capacity for ever).
 * A shard that got fewer permits than it asked for is remembered and woken when capacity
 * frees, so waiting runs start as others finish, with no polling.
 */
export class TenantGate extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  /** The API token bucket lives in memory: losing it on eviction only forgives a burst. */
  private bucket = { tokens: 0, at: 0 };

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS permits (permit TEXT PRIMARY KEY, shard TEXT NOT NULL, expires_at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS waiters (shard TEXT PRIMARY KEY);
    `);
  }

  /** Takes one API request from a bucket of `perSecond` tokens that refills continuously. */
  async takeRequest(perSecond: number): Promise<{ ok: boolean; retryAfterMs: number }> {
    const now = Date.now();
    const elapsed = (now - this.bucket.at) / 1000;
    this.bucket = { tokens: Math.min(perSecond, this.bucket.tokens + elapsed * perSecond), at: now };
    if (this.bucket.tokens >= 1) {
      this.bucket.tokens -= 1;
      return { ok: true, retryAfterMs: 0 };
    }
    return { ok: false, retryAfterMs: Math.ceil(((1 - this.bucket.tokens) / perSecond) * 1000) };
  }

  /**
   * Grants as many of the asked `permits` (one per admission of a run: run id and fence) as
   * `limit` allows, in order; one already held is kept (a repeated ask is harmless). The shard
   * is woken later if any were refused.
   */
  async acquire(shard: string, permits: string[], limit: number, leaseMs: number): Promise<string[]> {
    const now = Date.now();
    const granted: string[] = [];
    this.ctx.storage.transactionSync(() => {
      this.sql.exec("DELETE FROM permits WHERE expires_at <= ?", now);
      let held = this.sql.exec("SELECT COUNT(*) AS n FROM permits").one().n as number;
      for (const permit of permits) {
        const renewed = this.sql.exec("UPDATE permits SET expires_at = ? WHERE permit = ?", now + leaseMs, permit).rowsWritten;
        if (renewed > 0 || held < limit) {
          if (renewed === 0) {
            this.sql.exec("INSERT INTO permits (permit, shard, expires_at) VALUES (?, ?, ?)", permit, shard, now + leaseMs);
            held++;
          }
          granted.push(permit);
        }
      }
      if (granted.length < permits.length) this.sql.exec("INSERT INTO waiters (shard) VALUES (?) ON CONFLICT DO NOTHING", shard);
    });
    await this.armAlarm();
    return granted;
  }

  /** Extends permits still held (a long-running attempt heartbeats; a dispatch is sent again). */
  async renew(permits: string[], leaseMs: number): Promise<void> {
    const until = Date.now() + leaseMs;
    for (const permit of permits) this.sql.exec("UPDATE permits SET expires_at = MAX(expires_at, ?) WHERE permit = ?", until, permit);
    await this.armAlarm();
  }

  /** Gives permits back; waiting shards are woken to use the freed capacity. */
  async release(permits: string[]): Promise<void> {
    for (const permit of permits) this.sql.exec("DELETE FROM permits WHERE permit = ?", permit);
    this.wakeWaiters();
    await this.armAlarm();
  }

  /** Permits whose lease ran out are dropped, and their capacity handed on. */
  override async alarm(): Promise<void> {
    this.sql.exec("DELETE FROM permits WHERE expires_at <= ?", Date.now());
    this.wakeWaiters();
    await this.armAlarm();
  }

  async inFlight(): Promise<number> {
    return this.sql.exec("SELECT COUNT(*) AS n FROM permits").one().n as number;
  }

  /**
   * Wakes every waiting shard without awaiting it: a shard's wake-up asks this gate again, and
   * a waiter whose wake is lost is still re-checked by its own alarm.
   */
  private wakeWaiters(): void {
    const waiters = this.sql.exec("SELECT shard FROM waiters").toArray().map((r) => r.shard as string);
    if (waiters.length === 0) return;
    this.sql.exec("DELETE FROM waiters");
    this.ctx.waitUntil(Promise.allSettled(waiters.map((shard) => shardStub(this.env, shard).admitWaiting())));
  }

  /** The alarm is needed only while shards wait: then it is the earliest permit expiry. */
  private async armAlarm(): Promise<void> {
    const waiting = this.sql.exec("SELECT 1 FROM waiters LIMIT 1").toArray().length > 0;
    const at = waiting ? (this.sql.exec("SELECT MIN(expires_at) AS t FROM permits").one().t as number | null) : null;
    if (at === null) await this.ctx.storage.deleteAlarm();
    else if ((await this.ctx.storage.getAlarm()) !== at) await this.ctx.storage.setAlarm(at);
  }
}
