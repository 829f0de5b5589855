import type { ShardApi } from "./protocol/shard-rpc";

/**
 * How the Worker reaches its Durable Objects, by name. A shard is typed by its contract, not
 * its class, so callers depend on what a shard promises and never on how it keeps it.
 */
export function shardStub(env: Env, shard: string): ShardApi {
  return env.SHARD.get(env.SHARD.idFromName(shard));
}

export function gateStub(env: Env, tenantId: string) {
  return env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenantId));
}

/** One of the fixed set of sign-in throttle objects (`throttle-<n>`, src/gate/sign-in-names.ts), or the refusals' `totals`. */
export function signInStub(env: Env, name: string) {
  return env.SIGN_IN_THROTTLE.get(env.SIGN_IN_THROTTLE.idFromName(name));
}
