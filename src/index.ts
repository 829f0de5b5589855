import { app } from "./api/app";
import { operationOf } from "./api/operation";
import { metered } from "./metered";
import type { QueueMessage } from "./protocol/queue-messages";
import { handleQueue } from "./queue-handler";
import { sweep } from "./reconcile/sweep";

export { SignInThrottle } from "./gate/sign-in-throttle";
export { TenantGate } from "./gate/tenant-gate";
export { Shard } from "./shard/shard";

/** The scheduler's entry points: the API and the reconciliation sweep, and the queue consumer for the tests' one Worker. */
export default {
  fetch(request: Request, env: Env, ctx: ExecutionContext) {
    return metered(
      env,
      ctx,
      () => operationOf(request),
      (counted) => Promise.resolve(app.fetch(request, counted, ctx)),
    );
  },

  /**
   * Deployed, the runner Worker consumes the queues (runner/wrangler.toml) and this is never
   * called; the workerd tests' one Worker consumes through it (vitest.config.ts).
   */
  queue: handleQueue,

  async scheduled(_controller, env, ctx) {
    const report = await metered(
      env,
      ctx,
      () => "sweep",
      (counted) => sweep(counted),
    );
    console.log(JSON.stringify({ sweep: report }));
  },
} satisfies ExportedHandler<Env, QueueMessage>;
