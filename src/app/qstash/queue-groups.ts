import { getQueueRow } from "../../catalog/qstash";
import { gateStub } from "../../stubs";

/**
 * A QStash queue is a flow-control group of its tenant (src/model/flow-control.ts): its messages'
 * jobs name `queue:<name>`, and the queue sets the group's own limits at the tenant's gate, which
 * win over what each message stated when it was enqueued. So a change of parallelism holds every
 * message already enqueued, and a paused queue is a parallelism of 0: its messages wait at the
 * gate, their runs kept, and resuming lets them go, oldest first.
 */
export const queueGroup = (name: string) => `queue:${name}`;

/** Tells the tenant's gate what the queue, as the catalog has it now, allows (nothing, once it is deleted). */
export async function syncQueueGroup(env: Env, tenantId: string, name: string): Promise<void> {
  const q = await getQueueRow(env.DB, tenantId, name);
  await gateStub(env, tenantId).setGroupLimits(queueGroup(name), q ? { parallelism: q.paused ? 0 : q.parallelism } : null);
}

/** Each queue's messages waiting for a place, as the shards holding them last told the gate. */
export async function queueLags(env: Env, tenantId: string, names: string[]): Promise<Map<string, number>> {
  if (names.length === 0) return new Map();
  const figures = await gateStub(env, tenantId).groupFigures(names.map(queueGroup));
  return new Map(names.map((n) => [n, figures[queueGroup(n)]?.waiting ?? 0]));
}
