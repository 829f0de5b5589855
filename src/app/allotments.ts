import { LRUCache } from "lru-cache";
import type { GateAnswer } from "../gate/blocks";

/**
 * What this isolate holds of an allowance its tenant's gate keeps (src/gate/tenant-gate.ts):
 * API requests (request-rate.ts), room for jobs under `maxJobs` (job-room.ts). The gate stays
 * the one authority; the isolate takes a block at a time and spends it locally, so a tenant's
 * steady requests cost a gate call per block, not one each. A block lapses at its `until` (less
 * the `margin` given), so none is spent late or kept.
 *
 * The next block's size follows what the isolate spent: doubled (up to `maxBlock`, and what the
 * gate allows) when it spent the last one before it lapsed, halved when one lapsed with more than
 * half of it left. An isolate that sees a tenant now and then takes one at a time, and
 * leaves the rest to the tenant's other isolates.
 *
 * Each request that finds too little asks for itself, since a Worker may not await another
 * request's promise (its continuation would run in that request's context, or be cancelled
 * with it): requests at once that find the block spent each ask, and what their answers bring
 * joins what the others hold, so a request the gate refused may still be served from a block
 * another brought. A refusal is remembered until its retry time, and answered from memory
 * meanwhile.
 */

/** What a request took: `got` (its need, or with `partial` at least 1) usable until `until`, of `epoch`; or nothing, and how long to wait. */
export type Taken = { got: number; until: number; epoch?: number | undefined } | { got: 0; retryAfterMs: number };

type Ask = (want: number, missing: number) => Promise<GateAnswer>;

export interface Held {
  left: number;
  until: number;
  epoch?: number | undefined;
  /** What the last ask wanted, as the next one's size is worked out from. */
  block: number;
}

/** Tenants an isolate keeps allowances for at most: the least recently used are dropped (their rest lapses unspent). */
const MAX_TENANTS = 10_000;

export class Allotments {
  private readonly held = new LRUCache<string, Held>({ max: MAX_TENANTS });
  private readonly refusedUntil = new LRUCache<string, number>({ max: MAX_TENANTS });

  constructor(
    private readonly maxBlock: number,
    /** How long before its gate's `until` a block stops being spent here. */
    private readonly margin = 0,
  ) {}

  /**
   * Takes `need` of `key`'s allowance, or with `partial` as much of it as there is (at least 1);
   * `ask(want, missing)` asks the gate for `want` more, `missing` of them to meet the need (the
   * rest a block for the requests to come); it may grant fewer.
   */
  async take(key: string, need: number, ask: Ask, partial = false): Promise<Taken> {
    for (;;) {
      const now = Date.now();
      const held = this.held.get(key);
      const left = held && this.usable(held, now) ? held.left : 0;
      if (left >= need) {
        held!.left -= need;
        return { got: need, until: held!.until, epoch: held!.epoch };
      }
      const refusedUntil = this.refusedUntil.get(key) ?? 0;
      if (refusedUntil > now) {
        if (!partial || left === 0) return { got: 0, retryAfterMs: refusedUntil - now };
        held!.left = 0;
        return { got: left, until: held!.until, epoch: held!.epoch };
      }
      await this.ask(key, need - left, held, ask);
    }
  }

  private usable(held: Held, now: number): boolean {
    return held.until - this.margin > now;
  }

  /**
   * Forgets what the isolate holds of `key`'s allowance, and a refusal it remembers: the block
   * lapsed where it was to be spent, or the gate has more to give than when it refused.
   */
  forget(key: string): void {
    this.held.delete(key);
    this.refusedUntil.delete(key);
  }

  private async ask(key: string, missing: number, before: Held | undefined, ask: Ask): Promise<void> {
    const block = before === undefined ? 1 : nextBlock(before, this.usable(before, Date.now()), this.maxBlock);
    const answer = await ask(Math.max(missing, block), missing);
    if (!("until" in answer)) {
      this.refusedUntil.set(key, Date.now() + answer.retryAfterMs);
      return;
    }
    // What is held now (other requests may have spent it, or brought more, meanwhile) goes with
    // the new block, until the sooner of their ends; a block of another epoch is worth nothing.
    const now = this.held.get(key);
    const keep = now !== undefined && this.usable(now, Date.now()) && now.epoch === answer.epoch;
    this.held.set(key, {
      left: (keep ? now.left : 0) + answer.granted,
      until: keep ? Math.min(now.until, answer.until) : answer.until,
      epoch: answer.epoch,
      block,
    });
  }
}

/**
 * The size of the next block, from how the last one went: spent before it lapsed (it is still
 * usable, and short), doubled; lapsed with more than half of it unspent, halved; else the same.
 */
export function nextBlock(last: Held, stillUsable: boolean, maxBlock: number): number {
  if (stillUsable) return Math.min(maxBlock, last.block * 2);
  if (last.left > last.block / 2) return Math.max(1, Math.floor(last.block / 2));
  return last.block;
}
