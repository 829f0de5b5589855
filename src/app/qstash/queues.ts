import { deleteQueueRow, getQueueRow, type QueueRow, upsertQueueRow } from "../../catalog/qstash";
import { audit, entryOf } from "../audit";
import type { Caller } from "../caller";
import { syncQueueGroup } from "./queue-groups";
import { tenantOf } from "./tenant";

/**
 * A queue's changes: each row written with its audit entry in one D1 batch (a queue is
 * configuration: docs/security.md), then its group's limits at the tenant's gate
 * (queue-groups.ts), so that a paused queue's messages, those enqueued before and after, wait
 * for a place (none, while it is paused) and resuming lets them go, a message whose time passed
 * at once. The gate is told every time, so a change repeated after a failed one sets what the
 * catalog says.
 */

const record = (q: Pick<QueueRow, "parallelism" | "paused">) => ({ parallelism: q.parallelism, paused: q.paused });

const queueEntry = (caller: Caller, action: string, name: string, before: unknown, after: unknown) =>
  entryOf(caller, { tenantId: tenantOf(caller), action, subject: name, before, after });

/** Creates or updates a queue; `paused` changes only when it differs (the SDK sends it on every upsert). */
export async function upsertQueue(env: Env, caller: Caller, name: string, set: { parallelism?: number; paused?: boolean }): Promise<void> {
  const tenantId = tenantOf(caller);
  const before = await getQueueRow(env.DB, tenantId, name);
  const paused = set.paused !== undefined && set.paused !== (before?.paused ?? false) ? set.paused : undefined;
  const after = { parallelism: set.parallelism ?? before?.parallelism ?? 1, paused: paused ?? before?.paused ?? false };
  const entry = queueEntry(caller, before ? "queue.update" : "queue.create", name, before && record(before), after);
  await upsertQueueRow(env.DB, tenantId, name, { parallelism: set.parallelism, paused }, Date.now(), [
    audit(env.DB, entry, { ifChanged: true }),
  ]);
  await syncQueueGroup(env, tenantId, name);
}

/** Pauses or resumes a queue that exists (false: none by that name); one already so is not written again. */
export async function setQueuePaused(env: Env, caller: Caller, name: string, paused: boolean): Promise<boolean> {
  const tenantId = tenantOf(caller);
  const before = await getQueueRow(env.DB, tenantId, name);
  if (!before) return false;
  if (before.paused !== paused) {
    const entry = queueEntry(caller, paused ? "queue.pause" : "queue.resume", name, { paused: before.paused }, { paused });
    await upsertQueueRow(env.DB, tenantId, name, { paused }, Date.now(), [audit(env.DB, entry, { ifChanged: true })]);
  }
  await syncQueueGroup(env, tenantId, name);
  return true;
}

/** Deletes a queue (false: none by that name); its messages left in flight or waiting are held to what each stated when enqueued. */
export async function deleteQueue(env: Env, caller: Caller, name: string): Promise<boolean> {
  const tenantId = tenantOf(caller);
  const before = await getQueueRow(env.DB, tenantId, name);
  if (!before) return false;
  const entry = queueEntry(caller, "queue.delete", name, record(before), null);
  const deleted = await deleteQueueRow(env.DB, tenantId, name, [audit(env.DB, entry, { ifChanged: true })]);
  await syncQueueGroup(env, tenantId, name);
  return deleted;
}
