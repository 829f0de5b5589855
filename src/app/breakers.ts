import { notFound } from "../api/errors";
import type { Breaker } from "../gate/breaker";
import { DEFAULT_TENANT } from "../model/ids";
import { gateStub } from "../stubs";
import { type Caller, scopeOf } from "./caller";
import { loadTenant } from "./tenants";

/** A tenant's circuit breakers that are not plainly closed; a tenant key sees its own, the admin any tenant's (default `default`). */
export async function listBreakers(
  env: Env,
  caller: Caller,
  named: string | undefined,
): Promise<{ tenantId: string; breakers: Breaker[] }> {
  const own = scopeOf(caller);
  if (own !== null && named !== undefined && named !== own) throw notFound("tenant", named);
  const tenant = await loadTenant(env, caller, own ?? named ?? DEFAULT_TENANT);
  return { tenantId: tenant.id, breakers: await gateStub(env, tenant.id).breakers() };
}
