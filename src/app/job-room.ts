import { ApiError } from "../api/errors";
import { CatalogUnavailable } from "../catalog/d1";
import type { CatalogJob } from "../catalog/jobs";
import type { Tenant } from "../catalog/tenants";
import { MAX_ROOM_BLOCK } from "../gate/job-count";
import { isLiveAt } from "../model/live-jobs";
import { gateStub } from "../stubs";
import { Allotments } from "./allotments";

/**
 * A tenant's room under its `maxJobs`, leased from its gate (src/gate/job-count.ts says how it
 * is counted) a block at a time, so that a tenant's steady creations cost a gate call per block
 * and no count in D1. A job is written on a lease only while the lease is of the gate's current
 * count (src/catalog/insert-jobs.ts); one its gate has counted again since is taken again.
 */

const room = new Allotments(MAX_ROOM_BLOCK);

/** Room taken: `got` jobs at lease `epoch` (null: the tenant has no quota, nothing was leased), or none, and when to ask again. */
export type Room = { got: number; epoch: number | null } | { got: 0; retryAfterMs: number };

/** Room for `n` of the tenant's jobs (with `partial`, as many of them as fit, at least 1). */
export async function takeJobRoom(env: Env, tenant: Tenant, n: number, partial: boolean): Promise<Room> {
  const maxJobs = tenant.limits.maxJobs;
  if (maxJobs === null) return { got: n, epoch: null };
  const taken = await room.take(
    tenant.id,
    n,
    async (want, missing) => {
      const answer = await gateStub(env, tenant.id).takeJobRoom(tenant.id, maxJobs, tenant.version, missing, want);
      if ("unavailable" in answer) throw new CatalogUnavailable(answer.unavailable);
      return answer;
    },
    partial,
  );
  return "retryAfterMs" in taken ? taken : { got: taken.got, epoch: taken.epoch ?? null };
}

/** A creation (or a change that makes a finished job live again) over the quota. */
export const quotaExceeded = (tenant: Tenant) =>
  new ApiError(
    403,
    "quota_exceeded",
    `this tenant may have at most ${tenant.limits.maxJobs} live jobs (not deleted, with an instant of their schedule to come); delete one first`,
  );

/**
 * What this isolate holds of the tenant's room, and a refusal it remembers, forgotten: a lease D1
 * no longer takes (the gate counted again since it was granted), or a tenant changed here.
 */
export function forgetJobRoom(tenantId: string): void {
  room.forget(tenantId);
}

/**
 * Jobs deleted through the API give their places back to the gate, those that were live when
 * deleted (a finished one held none): at once, so that a creation right after finds room. Not
 * given back (the gate unreachable), a place stays counted until the gate's next recount.
 */
export async function giveBackJobRoom(env: Env, tenant: Tenant, deleted: CatalogJob[]): Promise<void> {
  if (tenant.limits.maxJobs === null) return;
  const freed = deleted.filter((j) => j.deletedAt !== null && isLiveAt({ ...j, deletedAt: null }, j.deletedAt)).map((j) => j.deletedAt!);
  if (freed.length === 0) return;
  try {
    await gateStub(env, tenant.id).giveBackJobs(freed);
    // A refusal this isolate remembers may no longer hold.
    room.forget(tenant.id);
  } catch (err) {
    console.error(`tenant ${tenant.id}: ${freed.length} job place(s) not given back to the gate`, err);
  }
}
