import { app } from "./api/app";
import { consumeDeadLetters, consumeDispatches } from "./consumer/consume";
import { sweep } from "./reconcile/sweep";
import type { DispatchMessage } from "./shard/contract";

export { TenantGate } from "./gate/tenant-gate";
export { Shard } from "./shard/shard";

/** Named in wrangler.toml as the dispatch queue's dead_letter_queue. */
const DEAD_LETTER_QUEUE = "edgecron-runs-dlq";

/** The Worker's three entry points: the API, the Queue consumer and the reconciliation sweep. */
export default {
  fetch: app.fetch,

  async queue(batch, env) {
    if (batch.queue === DEAD_LETTER_QUEUE) await consumeDeadLetters(batch, env);
    else await consumeDispatches(batch, env);
  },

  async scheduled(_controller, env) {
    const report = await sweep(env);
    console.log(JSON.stringify({ sweep: report }));
  },
} satisfies ExportedHandler<Env, DispatchMessage>;
