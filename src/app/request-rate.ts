import { ApiError } from "../api/errors";
import type { Tenant } from "../catalog/tenants";
import { MAX_REQUEST_BLOCK } from "../gate/request-bucket";
import { gateStub } from "../stubs";
import { Allotments } from "./allotments";

/**
 * A tenant key's request against its tenant's `requestsPerSecond`: spent from the tokens this
 * isolate took from the tenant's gate, a block at a time (src/gate/request-bucket.ts says what
 * the limit guarantees), so steady requests cost a gate call per block. Over the limit: 429 with
 * Retry-After, and the headers the QStash SDK reads (the /v2 surface, docs/qstash.md).
 */

const tokens = new Allotments(MAX_REQUEST_BLOCK);

/** Throws the 429 when the tenant is over its rate; a tenant without one (null) is not counted. */
export async function takeRequest(env: Env, tenant: Tenant): Promise<void> {
  const rps = tenant.limits.requestsPerSecond;
  if (rps === null) return;
  const taken = await tokens.take(tenant.id, 1, (want) => gateStub(env, tenant.id).takeRequests(rps, want));
  if (!("retryAfterMs" in taken)) return;
  const { retryAfterMs } = taken;
  throw new ApiError(429, "rate_limited", `this tenant may make ${rps} requests per second; retry after the Retry-After seconds`, {
    "Retry-After": String(Math.max(1, Math.ceil(retryAfterMs / 1000))),
    "Burst-RateLimit-Limit": String(rps),
    "Burst-RateLimit-Remaining": "0",
    "Burst-RateLimit-Reset": String(Math.ceil((Date.now() + retryAfterMs) / 1000)),
  });
}

/** The tokens this isolate holds for the tenant, and a refusal it remembers, forgotten: the tenant changed here. */
export function forgetRequests(tenantId: string): void {
  tokens.forget(tenantId);
}
