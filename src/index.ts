import { app } from "./api/app";
import { consumeDispatches } from "./consumer/consume";
import type { DispatchMessage, Env } from "./env";
import { sweep } from "./reconcile/sweep";

export { Shard } from "./shard/shard";

/** The Worker's three entry points: the API, the Queue consumer and the reconciliation sweep. */
export default {
  fetch: app.fetch,

  async queue(batch, env) {
    await consumeDispatches(batch, env);
  },

  async scheduled(_controller, env) {
    const report = await sweep(env);
    console.log(JSON.stringify({ sweep: report }));
  },
} satisfies ExportedHandler<Env, DispatchMessage>;
