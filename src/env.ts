import type { Shard } from "./shard/shard";

/** A dispatch on the Queue: just enough to claim the run from its shard, no job data. */
export interface DispatchMessage {
  shard: string;
  runId: string;
  fence: number;
}

export interface Env {
  DB: D1Database;
  SHARD: DurableObjectNamespace<Shard>;
  RUNS: Queue<DispatchMessage>;
  /** Bearer token for every /v1 route (a secret in production). */
  API_TOKEN: string;
  SHARD_COUNT: string;
  /** How long a dispatched run may wait for a consumer before the shard sends it again. */
  CLAIM_TIMEOUT_MS?: string;
  /** This Worker's public base URL, when known: targets then get X-Edgecron-Complete-Url. */
  PUBLIC_URL?: string;
}

export function shardStub(env: Env, shard: string): DurableObjectStub<Shard> {
  return env.SHARD.get(env.SHARD.idFromName(shard));
}
