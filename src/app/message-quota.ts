import { ApiError } from "../api/errors";
import type { Tenant } from "../catalog/tenants";
import { gateStub } from "../stubs";

/**
 * A publish's messages reserved under the tenant's `maxLiveMessages` at its gate, before any is
 * handed to a shard (src/gate/message-quota.ts says how they are counted). Over the limit: a
 * 429 naming it, and nothing is created. A tenant without the limit (null) is not counted. One
 * call to the gate, whatever the count's state: the gate recounts from the shards in its alarm.
 */

/** Most messages one request may make: a batch's items, each once per endpoint of its URL group. */
export const MAX_MESSAGES_PER_REQUEST = 1_000;

/** Reserves `n` messages made at `madeAt` (the time in their ids); returns what gives them back if they are not made after all. */
export async function reserveMessages(env: Env, tenant: Tenant, n: number, madeAt: number): Promise<() => Promise<void>> {
  const limit = tenant.limits.maxLiveMessages;
  if (limit === null || n === 0) return async () => {};
  const gate = gateStub(env, tenant.id);
  const answer = await gate.reserveMessages(tenant.id, n, madeAt, limit);
  if (answer.verdict !== "granted") {
    throw new ApiError(
      429,
      "quota_exceeded",
      `limits.maxLiveMessages: this tenant may have at most ${limit} live messages (published and not yet delivered, dead or cancelled), ` +
        `${answer.live} are, and this request makes ${n}; wait for some to be delivered, or cancel some`,
      { "Retry-After": String(Math.ceil(answer.retryAfterMs / 1000)) },
    );
  }
  return async () => {
    try {
      await gate.giveBackMessages(n, madeAt);
    } catch (err) {
      // Counted until the next recount puts it right.
      console.error(`tenant ${tenant.id}: ${n} message(s) not given back to the gate`, err);
    }
  };
}
