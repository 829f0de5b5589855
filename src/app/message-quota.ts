import { ApiError } from "../api/errors";
import { shardsInUse } from "../catalog/shards";
import type { Tenant } from "../catalog/tenants";
import { RECOUNT_EVERY_MS } from "../gate/message-quota";
import { gateStub, shardStub } from "../stubs";

/**
 * A publish's messages reserved under the tenant's `maxLiveMessages` at its gate, before any is
 * handed to a shard (src/gate/message-quota.ts says how they are counted). Over the limit: a
 * 429 naming it, and nothing is created. A tenant without the limit (null) is not counted.
 */

/** Most messages one request may make: a batch's items, each once per endpoint of its URL group. */
export const MAX_MESSAGES_PER_REQUEST = 1_000;

/** Reserves `n` messages; returns what gives them back if they are not made after all. */
export async function reserveMessages(env: Env, tenant: Tenant, n: number): Promise<() => Promise<void>> {
  const limit = tenant.limits.maxLiveMessages;
  if (limit === null || n === 0) return async () => {};
  const gate = gateStub(env, tenant.id);
  const first = await gate.reserveMessages(n, limit);
  const answer =
    first.verdict === "recount" ? await gate.messagesCounted(first.from, await countLiveMessages(env, tenant.id), n, limit) : first;
  if (answer.verdict !== "granted") {
    throw new ApiError(
      429,
      "quota_exceeded",
      `limits.maxLiveMessages: this tenant may have at most ${limit} live messages (published and not yet delivered, dead or cancelled), ` +
        `${answer.live} are, and this request makes ${n}; wait for some to be delivered, or cancel some`,
      { "Retry-After": String(Math.ceil(RECOUNT_EVERY_MS / 1000)) },
    );
  }
  return async () => {
    try {
      await gate.giveBackMessages(n);
    } catch (err) {
      // Counted until the next recount puts it right.
      console.error(`tenant ${tenant.id}: ${n} message(s) not given back to the gate`, err);
    }
  };
}

/** The tenant's live messages, as each shard it is registered in counts its own: one call per shard. */
async function countLiveMessages(env: Env, tenantId: string): Promise<number> {
  const shards = await shardsInUse(env.DB, tenantId);
  try {
    const counts = await Promise.all(shards.map((shard) => shardStub(env, shard).countLiveMessages(tenantId)));
    return counts.reduce((a, b) => a + b, 0);
  } catch (err) {
    console.error(`tenant ${tenantId}: its live messages could not be counted`, err);
    throw new ApiError(503, "shard_unavailable", "a shard could not count this tenant's messages; retry the request", {
      "Retry-After": "5",
    });
  }
}
