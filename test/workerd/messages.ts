import { runInDurableObject } from "cloudflare:test";
import { expect, vi } from "vitest";
import { shardNamedBy } from "../../src/model/ids";
import type { Shard } from "../../src/shard/shard";
import { shardOf } from "./helpers";

/** The shard that holds a QStash message's job: the one its id names (no catalog row records it). */
export const messageShard = (jobId: string) => ({ shard: shardNamedBy(jobId)! });

/** A message's job's row in its shard, or null once it has left. */
export function messageRow(jobId: string): Promise<{ spec: string; deleted: number; standalone: number } | null> {
  return runInDurableObject(shardOf(messageShard(jobId)), (_s: Shard, state) => {
    const row = state.storage.sql.exec("SELECT spec, deleted, standalone FROM jobs WHERE id = ?", jobId).toArray()[0];
    return (row as { spec: string; deleted: number; standalone: number } | undefined) ?? null;
  });
}

/** The ids of a tenant's dead letters once `/v2/dlq` lists `count` of them (their messages failing on the queue meanwhile). */
export function deadLetterIds(
  tenant: { api: (path: string, init?: RequestInit) => Promise<Response> },
  count: number,
  timeout = 20_000,
): Promise<string[]> {
  return vi.waitFor(
    async () => {
      const { messages } = (await (await tenant.api("/v2/dlq")).json()) as { messages: Array<{ dlqId: string }> };
      expect(messages).toHaveLength(count);
      return messages.map((m) => m.dlqId);
    },
    { timeout, interval: 200 },
  );
}
