import { CatalogUnavailable } from "../catalog/d1";
import { recountLiveJobs } from "../catalog/live-jobs";
import { givenBack, type JobCount, leaseRoom, mayRecountAt, mustRecount, type RoomAnswer, recounted, staleAt } from "./job-count";

export const JOB_ROOM_SCHEMA = "CREATE TABLE IF NOT EXISTS job_count (one INTEGER PRIMARY KEY CHECK (one = 1), state TEXT NOT NULL);";

/**
 * A tenant's live jobs under its `maxJobs`, as its gate keeps them (the rules are job-count.ts's):
 * one row, the count as JSON, written per lease of room; counted in D1 now and then.
 */
export class JobRoom {
  constructor(
    private readonly sql: Pick<SqlStorage, "exec">,
    private readonly db: D1Database,
    private readonly waitUntil: (work: Promise<unknown>) => void,
  ) {}

  /**
   * Room for `need` of the tenant's jobs, and up to `want` (a block for the isolate to spend),
   * under `maxJobs` as the isolate read the tenant (at `tenantVersion`). Counted in D1 first when
   * the count was never taken or is of an older tenant, and before a refusal (at most once every
   * RECOUNT_EVERY_MS). `unavailable`: D1 could not count.
   */
  async take(
    tenantId: string,
    maxJobs: number,
    tenantVersion: number,
    need: number,
    want: number,
  ): Promise<RoomAnswer | { unavailable: string }> {
    const tenant = { version: tenantVersion, maxJobs };
    try {
      while (mustRecount(this.count(), tenantVersion)) await this.recount(tenantId, tenant);
      let lease = leaseRoom(this.count()!, maxJobs, tenantVersion, need, want, Date.now());
      if (!("until" in lease.answer) && (this.recounting !== null || mayRecountAt(this.count()!, Date.now()))) {
        await this.recount(tenantId, tenant);
        lease = leaseRoom(this.count()!, maxJobs, tenantVersion, need, want, Date.now());
      }
      if (lease.next !== this.count()) this.save(lease.next);
      if (this.recounting === null && staleAt(this.count()!, Date.now())) {
        this.waitUntil(this.recount(tenantId, tenant).catch((err) => console.error(`tenant ${tenantId}: recount of live jobs`, err)));
      }
      return lease.answer;
    } catch (err) {
      if (err instanceof CatalogUnavailable) return { unavailable: err.message };
      throw err;
    }
  }

  /**
   * The tenant's quota changed (to `maxJobs`, at `tenantVersion`): counted again now, so that the
   * leases granted under the quota before no longer insert.
   */
  async quotaChanged(tenantId: string, maxJobs: number, tenantVersion: number): Promise<void> {
    await this.recount(tenantId, { version: tenantVersion, maxJobs });
    // One under way began before the change: its epoch may be older than the change.
    if (mustRecount(this.count(), tenantVersion)) await this.recount(tenantId, { version: tenantVersion, maxJobs });
  }

  /** Places of jobs deleted at `deletedAts` (each live when deleted), given back. */
  giveBack(deletedAts: number[]): void {
    this.recounting?.givenBack.push(...deletedAts);
    const count = this.count();
    if (count === null) return;
    // In memory: the next lease writes it. Lost with the gate, the count is above the truth
    // until a recount, which a refusal begins.
    this.counted = deletedAts.reduce(givenBack, count);
  }

  /** The recount under way, if one is: its cutoff, the places given back meanwhile, and its end. */
  private recounting: { cutoff: number; givenBack: number[]; done: Promise<void> } | null = null;
  /** The count as last read or written; undefined: not read from storage yet. */
  private counted: JobCount | null | undefined = undefined;

  /** Live jobs as counted; null: never counted. */
  count(): JobCount | null {
    if (this.counted === undefined) {
      const row = this.sql.exec("SELECT state FROM job_count").toArray()[0];
      this.counted = row ? (JSON.parse(row.state as string) as JobCount) : null;
    }
    return this.counted;
  }

  private save(count: JobCount): void {
    this.counted = count;
    this.sql.exec(
      "INSERT INTO job_count (one, state) VALUES (1, ?) ON CONFLICT (one) DO UPDATE SET state = excluded.state",
      JSON.stringify(count),
    );
  }

  /** Counts the tenant's live jobs in D1, bumping its lease epoch (or waits for the recount under way), and keeps the count. */
  private async recount(tenantId: string, tenant: { version: number; maxJobs: number }): Promise<void> {
    if (this.recounting !== null) return this.recounting.done;
    const cutoff = Date.now();
    const state = { cutoff, givenBack: [] as number[], done: Promise.resolve() };
    this.recounting = state;
    state.done = (async () => {
      try {
        const found = await recountLiveJobs(this.db, tenantId, cutoff);
        if (!found) throw new Error(`tenant ${tenantId} is not in the catalog`);
        this.save(recounted(this.count(), found, cutoff, tenant, state.givenBack));
      } finally {
        this.recounting = null;
      }
    })();
    return state.done;
  }
}
