import { upsertQueueRow } from "../../catalog/qstash";
import type { Caller } from "../caller";
import { syncQueueGroup } from "./queue-groups";
import { tenantOf } from "./tenant";

/**
 * Pauses or resumes a queue: its flag, then its group's limits at the tenant's gate
 * (queue-groups.ts), so that a paused queue's messages, those enqueued before and after, wait
 * for a place (none, while it is paused) and resuming lets them go, a message whose time passed
 * at once.
 */
export async function setQueuePaused(env: Env, caller: Caller, name: string, paused: boolean): Promise<void> {
  const tenantId = tenantOf(caller);
  await upsertQueueRow(env.DB, tenantId, name, { paused }, Date.now());
  await syncQueueGroup(env, tenantId, name);
}
