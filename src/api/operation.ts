import type { MiddlewareHandler } from "hono";
import { matchedRoutes } from "hono/route";
import type { AppContext, AppEnv } from "./context";

/**
 * An API request's operation name for the cost meter: its method and the path of the route
 * that answered it, as the route table has it (`GET /v1/jobs/:id`). Taken from the route table
 * and never from the request's path, so that the names are as few as the routes: a name made
 * from a path would give each distinct path, real or not, a row of the meter (docs/cost.md).
 */

/** The route (not a middleware: those are registered for every method) that matches the request, if any. */
export function endpointOf(c: AppContext): { method: string; path: string } | undefined {
  return matchedRoutes(c).findLast((route) => route.method !== "ALL");
}

const names = new WeakMap<Request, string>();

/**
 * Notes the request's operation for `operationOf`, once it is answered. Only a request that
 * reached a route with a credential that was accepted is named: one refused for its path or
 * its credential is not metered at all, so a stream of junk requests writes no row. (The
 * callbacks of long-running targets carry no API credential; they touch neither D1 nor a gate,
 * which is all the Worker's meter counts.)
 */
export const nameOperation: MiddlewareHandler<AppEnv> = async (c, next) => {
  // The request as the Worker received it: a middleware below may put another in its place.
  const received = c.req.raw;
  try {
    await next();
  } finally {
    const endpoint = endpointOf(c);
    if (endpoint && c.get("caller")) names.set(received, `${c.req.method} ${endpoint.path}`);
  }
};

/** The operation `nameOperation` noted for this request, or null when it is not to be metered. */
export function operationOf(request: Request): string | null {
  return names.get(request) ?? null;
}
