import type { ShardApi } from "../protocol/shard-rpc";
import { shardStub } from "../stubs";

/**
 * What one sweep invocation may spend. Production counts, per invocation (the cron trigger's
 * scheduled() is one), D1 queries (1,000 on Workers Paid) and subrequests, of which a Durable
 * Object call is one (1,000 assumed: the paid plan; the free plan's 50 is not enough for the
 * sweep of a large catalog). `wrangler dev` and miniflare enforce neither, so the sweep
 * counts for itself, on the bindings, and stops well short: the rest is headroom for a
 * platform retry, and keeps one invocation to a few seconds, well inside the minute between
 * cron triggers and the 30 s of CPU a cron invocation may use. The consistency pass calls every
 * shard in use about once per invocation (it reads the jobs by id and groups them by shard), so
 * the calls must outnumber the shards: 400 leave room for about 300 shards (docs/sizing-and-throughput.md, "The sweep's timing").
 */
export interface SweepBudget {
  d1Queries: number;
  shardCalls: number;
}

export const SWEEP_BUDGET: SweepBudget = { d1Queries: 250, shardCalls: 400 };

/** A query or call past the budget: a bug in the sweep's arithmetic, refused before it reaches the platform. */
class BudgetExceeded extends Error {}

/** Counts what the sweep really spends, at the bindings, and refuses what would overspend. */
export class Meter {
  d1Queries = 0;
  shardCalls = 0;

  constructor(readonly budget: SweepBudget) {}

  /** Whether `d1` more queries and `calls` more shard calls still fit, beside `reserve` queries kept back. */
  affords(d1: number, calls: number, reserve = 0): boolean {
    return this.d1Queries + d1 + reserve <= this.budget.d1Queries && this.shardCalls + calls <= this.budget.shardCalls;
  }

  get d1Left(): number {
    return this.budget.d1Queries - this.d1Queries;
  }

  get callsLeft(): number {
    return this.budget.shardCalls - this.shardCalls;
  }

  /** `db` whose every executed statement is counted; a batch is not offered (the sweep needs none). */
  d1(db: D1Database): D1Database {
    const statement = (stmt: D1PreparedStatement): D1PreparedStatement =>
      ({
        bind: (...values: unknown[]) => statement(stmt.bind(...values)),
        first: (column?: string) => this.query(() => (column === undefined ? stmt.first() : stmt.first(column))),
        all: () => this.query(() => stmt.all()),
        run: () => this.query(() => stmt.run()),
        raw: (options?: { columnNames?: boolean }) => this.query(() => stmt.raw(options as { columnNames: true })),
      }) as unknown as D1PreparedStatement;
    return {
      prepare: (sql: string) => statement(db.prepare(sql)),
      batch: () => Promise.reject(new Error("the sweep's D1 meter does not count batches")),
      exec: () => Promise.reject(new Error("the sweep's D1 meter does not count exec")),
    } as unknown as D1Database;
  }

  /** The shard calls the sweep makes, each counted. */
  shard(env: Env, name: string): Pick<ShardApi, "compareJobs" | "applyJobs" | "applyTenants" | "assertAlarm"> {
    const stub = shardStub(env, name);
    return {
      compareJobs: (entries) => this.call(() => stub.compareJobs(entries)),
      applyJobs: (definitions, tenants) => this.call(() => stub.applyJobs(definitions, tenants)),
      applyTenants: (tenants) => this.call(() => stub.applyTenants(tenants)),
      assertAlarm: () => this.call(() => stub.assertAlarm()),
    };
  }

  private query<T>(run: () => Promise<T>): Promise<T> {
    if (this.d1Queries >= this.budget.d1Queries) return Promise.reject(new BudgetExceeded("D1 query budget spent"));
    this.d1Queries++;
    return run();
  }

  private call<T>(run: () => Promise<T>): Promise<T> {
    if (this.shardCalls >= this.budget.shardCalls) return Promise.reject(new BudgetExceeded("shard call budget spent"));
    this.shardCalls++;
    return run();
  }
}
