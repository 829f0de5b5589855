import { upsertQueueRow } from "../../catalog/qstash";
import type { Caller } from "../caller";
import { changeJob } from "../jobs";
import { findMessages } from "./messages";
import { tenantOf } from "./tenant";

/** Most messages of a queue one pause or resume changes (each is a job to pause or resume: a D1 write and a shard call). */
const MAX_HELD = 400;

/**
 * Pauses or resumes a queue: its flag, then each of its messages' jobs, so that a paused queue's
 * messages are held (not delivered) until it is resumed; messages enqueued meanwhile are created
 * paused (src/app/qstash/publish.ts). A resumed message whose time passed is delivered at once.
 */
export async function setQueuePaused(env: Env, caller: Caller, name: string, paused: boolean): Promise<void> {
  await upsertQueueRow(env.DB, tenantOf(caller), name, { paused }, Date.now());
  const jobs = await findMessages(env, caller, { queueName: [name] }, MAX_HELD);
  for (const job of jobs) if (job.paused !== paused) await changeJob(env, caller, job.id, { paused });
}
