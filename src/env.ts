import type { TenantGate } from "./gate/tenant-gate";
import type { DispatchMessage } from "./shard/contract";
import type { Shard } from "./shard/shard";

export interface Env {
  DB: D1Database;
  SHARD: DurableObjectNamespace<Shard>;
  /** One per tenant: its runs-in-flight permits and its API request rate. */
  TENANT_GATE: DurableObjectNamespace<TenantGate>;
  RUNS: Queue<DispatchMessage>;
  /** The admin token: every route, every tenant (a secret in production). */
  API_TOKEN: string;
  /** AES-256-GCM keys for targets' headers and bodies at rest: "kid:base64[,kid:base64…]", the first encrypts (a secret). */
  ENCRYPTION_KEYS: string;
  /** Master key tenants' request-signing secrets are derived from (a secret, ≥ 32 characters). */
  SIGNING_SECRET: string;
  /** "true" lets targets be loopback or private addresses: local development only. */
  ALLOW_PRIVATE_TARGETS?: string;
  SHARD_COUNT: string;
  /** How long a dispatched run may wait for a consumer before the shard sends it again. */
  CLAIM_TIMEOUT_MS?: string;
  /** This Worker's public base URL, when known: targets then get X-Edgecron-Complete-Url. */
  PUBLIC_URL?: string;
}

export function shardStub(env: Env, shard: string): DurableObjectStub<Shard> {
  return env.SHARD.get(env.SHARD.idFromName(shard));
}

export function gateStub(env: Env, tenantId: string): DurableObjectStub<TenantGate> {
  return env.TENANT_GATE.get(env.TENANT_GATE.idFromName(tenantId));
}

/** A required secret or setting is missing or malformed: the operator's to fix, not the client's. */
export class Misconfigured extends Error {}
