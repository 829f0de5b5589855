import type { PermitAsk } from "../gate/grants";
import type { QueueMessage } from "../protocol/queue-messages";
import type { ShardMeter } from "./meter";

/** What admission asks of a tenant's gate (a TenantGate Durable Object): permits for waiting runs. */
export interface PermitGate {
  admit(
    shard: string,
    asks: PermitAsk[],
    tenantLimit: number | null,
    leaseMs: number,
    alsoWaiting?: number,
  ): Promise<{ granted: string[]; retryAt: Record<string, number>; tenantRefused?: number }>;
}

/** What dispatch asks of a tenant's gate: to extend the permits of attempts that outlive their lease, and to take permits back. */
export interface PermitKeeper {
  renew(permits: string[], leaseMs: number, shard: string): Promise<unknown>;
  release(permits: string[]): Promise<unknown>;
}

/**
 * What the shard object (shard.ts) gives its capabilities: one object with named members, so
 * that a capability says which of them it uses (`Pick<ShardHost, ...>`) instead of taking a
 * row of closures in an order. Each setting has one way in: a capability reads it here, when
 * it needs it, never from its own copy. The host is made before the capabilities and calls back
 * into the shard only when a member is used, so any capability may hold it from its constructor.
 */
export interface ShardHost {
  /**
   * The shard's own name (every shard is reached through `idFromName`): what its dispatches and
   * completion tokens carry, what a gate knows it by, what its log lines and faults name.
   */
  name(): string;
  /**
   * CLAIM_TIMEOUT_MS (src/config.ts): how long a dispatch may take to reach a consumer. It sizes
   * a lease's allowance for the queue (leases.ts), a permit's first lease (admitter.ts), and
   * which jobs count as frequent (firing.ts).
   */
  claimTimeoutMs(): number;
  /**
   * Runs `apply` as one atomic change of the shard's state, the single writer's transaction
   * (shard.ts, `change`): what it sends, counts or leases stands only if it commits.
   */
  change<T>(apply: (now: number) => T): T;
  /** A tenant's gate; each call is a request the cost meter counts. */
  gateOf(tenantId: string): PermitGate & PermitKeeper;
  /** The dispatch queue a shard sends to (src/queues.ts): dispatches and notifications. Asked at each send. */
  queueOf(shard: string): Queue<QueueMessage>;
  /** The catalog (D1), which only an auto-pause writes from a shard, after commit. */
  catalog(): D1Database;
  /** The shard's SQLite storage, as the cost meter counts it: every statement is charged to the operation running. */
  readonly sql: Pick<SqlStorage, "exec">;
  /** The cost meter's counts (calls' queue messages, runs finished) and the shard's counters since its creation. */
  readonly meter: Pick<ShardMeter, "count" | "counters">;
}
