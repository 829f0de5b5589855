import { app } from "./api/app";
import { operationOf } from "./api/operation";
import { recordWorkerCost } from "./catalog/cost";
import { consumeDeadLetters, consumeDispatches } from "./consumer/consume";
import { D1Meter } from "./cost/d1-meter";
import { isDeadLetterQueue } from "./queues";
import { sweep } from "./reconcile/sweep";
import type { QueueMessage } from "./shard/contract";

export { SignInThrottle } from "./gate/sign-in-throttle";
export { TenantGate } from "./gate/tenant-gate";
export { Shard } from "./shard/shard";

/**
 * Runs one invocation with its D1 rows and gate calls counted, and adds them to the isolate's
 * tally, written now and then off the response's path. A lost record only undercounts: the meter never fails a request.
 * An invocation whose operation is null (an API request refused for its path or credential) is not recorded.
 */
async function metered<T>(env: Env, ctx: ExecutionContext, operation: () => string | null, work: (env: Env) => Promise<T>): Promise<T> {
  const meter = new D1Meter();
  try {
    return await work(meter.wrap(env));
  } finally {
    const name = meter.touched ? operation() : null;
    const write = name === null ? null : recordWorkerCost(env.DB, name, meter.counts, Date.now());
    if (write) ctx.waitUntil(write.catch((err) => console.error("cost meter:", err)));
  }
}

/** The Worker's three entry points: the API, the Queue consumer and the reconciliation sweep. */
export default {
  fetch(request: Request, env: Env, ctx: ExecutionContext) {
    return metered(
      env,
      ctx,
      () => operationOf(request),
      (counted) => Promise.resolve(app.fetch(request, counted, ctx)),
    );
  },

  /** A batch from any dispatch queue or any of their dead-letter queues: all carry any shard's dispatches. */
  async queue(batch, env, ctx) {
    const dead = isDeadLetterQueue(batch.queue);
    await metered(
      env,
      ctx,
      () => (dead ? "queue dead letters" : "queue"),
      (counted) => (dead ? consumeDeadLetters(batch, counted) : consumeDispatches(batch, counted)),
    );
  },

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
