import { recordWorkerCost } from "./catalog/cost";
import { D1Meter } from "./cost/d1-meter";

/**
 * Runs one invocation with its D1 rows and gate calls counted, and adds them to the isolate's
 * tally, written now and then off the response's path. A lost record only undercounts: the meter never fails a request.
 * An invocation whose operation is null (an API request refused for its path or credential) is not recorded; one that
 * touched neither D1 nor a gate is, as a call: a tenant's requests often cost neither (a key and a block of its
 * request rate remembered by the isolate), and a route's rows per call count them.
 */
export async function metered<T>(
  env: Env,
  ctx: ExecutionContext,
  operation: () => string | null,
  work: (env: Env) => Promise<T>,
): Promise<T> {
  const meter = new D1Meter();
  try {
    return await work(meter.wrap(env));
  } finally {
    const name = operation();
    const write = name === null ? null : recordWorkerCost(env.DB, name, meter.counts, Date.now());
    if (write) ctx.waitUntil(write.catch((err) => console.error("cost meter:", err)));
  }
}
