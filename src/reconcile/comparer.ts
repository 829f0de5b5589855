import { purgeTombstones, type ShardEntry } from "../catalog/jobs";
import { MAX_BOUND_PARAMETERS } from "../sql";
import type { Meter } from "./budget";
import { REPAIR_CHUNK, REPAIR_COST, redeliver } from "./repair";

/** Entries handed to one compareJobs call at most (the shard looks them up in chunks itself). */
const COMPARE_CHUNK = 5_000;

/**
 * Tombstones purged: at most a statement's worth (MAX_BOUND_PARAMETERS ids) per this many
 * entries compared, as when the pass read a shard 1,000 jobs at a time, and only with what the
 * comparisons and repairs left; the rest on the next pass (a tombstone's only use was to keep the
 * job's runs readable).
 */
const PURGE_EVERY = 1_000;

/** What a comparer may spend: ceilings on the meter's counts of D1 queries and shard calls. */
export interface Ceiling {
  d1: number;
  calls: number;
}

export interface Comparison<T> {
  compared: number;
  repaired: number;
  purged: number;
  /**
   * Stale entries it could not re-deliver within the ceiling, in the order they were taken. The
   * caller's cursor must stay before the first: the next invocation compares it again.
   */
  unrepaired: T[];
  /**
   * Shards whose compareJobs or applyJobs threw. Their entries count as compared: the cursor
   * moves past them, and the next consistency pass compares them again, so that one broken
   * shard holds neither the feed nor the pass.
   */
  failed: Set<string>;
}

type Taken<T> = { entry: T; seq: number };

/**
 * Compares catalog entries with their shards. The catalog is read in id (or change) order, in
 * which consecutive jobs are on different shards, so entries are grouped by shard over every
 * page the caller reads: a shard costs one compareJobs call per COMPARE_CHUNK of its entries,
 * not one per page. Stale jobs are re-delivered with their tenants' settings (`redeliver`);
 * tombstones their shard no longer holds are purged.
 *
 * Every entry taken is compared before `finish` returns. A shard's buffer costs a call from the
 * moment it opens (flushed when full, or at the end), so an entry is taken only while every open
 * buffer's call, and the first chunk of repairs, still fit under the ceiling. That first repair
 * is held back from the start: whatever else the invocation spent, it re-delivers at least one
 * chunk, so a caller whose cursor stops at an unrepaired job still moves on next time.
 */
export class ShardComparer<T extends ShardEntry> {
  private readonly buffers = new Map<string, Array<Taken<T>>>();
  private readonly result: Comparison<Taken<T>> = { compared: 0, repaired: 0, purged: 0, unrepaired: [], failed: new Set() };
  private repairHeld = true;
  private taken = 0;
  /** Tombstones their shards no longer hold, purged at the end with what is left. */
  private readonly gone: string[] = [];

  constructor(
    private readonly env: Env,
    private readonly db: D1Database,
    private readonly meter: Meter,
    private readonly ceiling: Ceiling,
  ) {}

  /** Whether a page read (one query) and a first entry from it, on a shard not yet open, still fit. */
  get roomForPage(): boolean {
    const left = this.left();
    return this.result.unrepaired.length === 0 && left.d1 >= 1 && left.calls >= 1;
  }

  /**
   * Takes `entries`, in order, while each one's cost fits; how many it took. It takes none once
   * a job was left unrepaired: the caller's cursor cannot move past that one anyway.
   */
  async take(entries: readonly T[]): Promise<number> {
    let n = 0;
    for (const entry of entries) {
      if (this.result.unrepaired.length > 0) break;
      let buffer = this.buffers.get(entry.shard);
      if (!buffer) {
        if (this.left().calls < 1) break;
        buffer = [];
        this.buffers.set(entry.shard, buffer);
      }
      buffer.push({ entry, seq: this.taken++ });
      n++;
      if (buffer.length >= COMPARE_CHUNK) await this.flush(entry.shard);
    }
    return n;
  }

  /** Compares what is still buffered (every shard at once: their calls are already counted). */
  async finish(): Promise<Comparison<T>> {
    const open = [...this.buffers];
    this.buffers.clear();
    const answers = await Promise.allSettled(
      open.map(([shard, buffer]) => this.meter.shard(this.env, shard).compareJobs(buffer.map((t) => t.entry))),
    );
    for (const [i, [shard, buffer]] of open.entries()) {
      const answer = answers[i]!;
      if (answer.status === "fulfilled") await this.settle(shard, buffer, answer.value);
      else this.fail(shard, buffer, answer.reason);
    }
    this.repairHeld = false;
    for (let i = 0; i < this.gone.length && this.left().d1 >= 1; i += MAX_BOUND_PARAMETERS) {
      this.result.purged += await purgeTombstones(this.db, this.gone.slice(i, i + MAX_BOUND_PARAMETERS));
    }
    const unrepaired = this.result.unrepaired.sort((a, b) => a.seq - b.seq).map((t) => t.entry);
    return { ...this.result, unrepaired };
  }

  /** Under the ceiling, less the calls the open buffers will make and the repair held back. */
  private left(): Ceiling {
    const held = this.repairHeld ? REPAIR_COST : { d1: 0, calls: 0 };
    return {
      d1: this.ceiling.d1 - this.meter.d1Queries - held.d1,
      calls: this.ceiling.calls - this.meter.shardCalls - this.buffers.size - held.calls,
    };
  }

  private async flush(shard: string): Promise<void> {
    const buffer = this.buffers.get(shard)!;
    this.buffers.delete(shard);
    let answer: { stale: string[]; gone: string[] };
    try {
      answer = await this.meter.shard(this.env, shard).compareJobs(buffer.map((t) => t.entry));
    } catch (err) {
      this.fail(shard, buffer, err);
      return;
    }
    await this.settle(shard, buffer, answer);
  }

  private fail(shard: string, buffer: Array<Taken<T>>, err: unknown): void {
    this.result.compared += buffer.length;
    if (!this.result.failed.has(shard)) console.error(`sweep: shard ${shard} failed; skipped until the next pass`, err);
    this.result.failed.add(shard);
  }

  /** Re-delivers what the shard lacks, chunk by chunk while a repair fits; notes some of what it no longer holds. */
  private async settle(shard: string, buffer: Array<Taken<T>>, answer: { stale: string[]; gone: string[] }): Promise<void> {
    this.result.compared += buffer.length;
    const client = this.meter.shard(this.env, shard);
    for (let i = 0; i < answer.stale.length; i += REPAIR_CHUNK) {
      if (!this.affordRepair()) {
        const left = new Set(answer.stale.slice(i));
        this.result.unrepaired.push(...buffer.filter((t) => left.has(t.entry.id)));
        break;
      }
      try {
        this.result.repaired += await redeliver(this.db, client, answer.stale.slice(i, i + REPAIR_CHUNK));
      } catch (err) {
        // Its other stale jobs too wait for the next pass: a shard that refused one chunk would refuse the rest.
        this.fail(shard, [], err);
        break;
      }
    }
    this.gone.push(...answer.gone.slice(0, Math.ceil(buffer.length / PURGE_EVERY) * MAX_BOUND_PARAMETERS));
  }

  /** The held repair first; after it, a repair only if it fits beside the open buffers' calls. */
  private affordRepair(): boolean {
    if (this.repairHeld) {
      this.repairHeld = false;
      return true;
    }
    const left = this.left();
    return left.d1 >= REPAIR_COST.d1 && left.calls >= REPAIR_COST.calls;
  }
}
