import { ApiError } from "../api/errors";
import { AUDIT_ID, JOB_ID, MAX_RUN_ID_LENGTH, TENANT_ID } from "../model/ids";
import type { RunView } from "../protocol/shard-rpc";

/**
 * Every list is paged newest (or first) first by a cursor: the position of the last item of
 * the previous page. A scheme says how a position is written into a cursor and read back.
 */
export interface CursorScheme<T, Position> {
  encode(item: T): string;
  /** The position a cursor names; null when it is not a cursor this API returned. */
  decode(cursor: string): Position | null;
}

export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/** Jobs page by id (ids sort by creation time). */
export const jobCursor: CursorScheme<{ id: string }, string> = {
  encode: (job) => job.id,
  decode: (cursor) => (JOB_ID.test(cursor) ? cursor : null),
};

/** Audit entries page by id (ids sort by time). */
export const auditCursor: CursorScheme<{ id: string }, string> = {
  encode: (entry) => entry.id,
  decode: (cursor) => (AUDIT_ID.test(cursor) ? cursor : null),
};

export const tenantCursor: CursorScheme<{ id: string }, string> = {
  encode: (tenant) => tenant.id,
  decode: (cursor) => (TENANT_ID.test(cursor) ? cursor : null),
};

/** Runs page by (scheduledAt, id): several runs can share an instant (triggers, backfills). */
export const runCursor = timedCursor((run) => run.scheduledAt, "scheduledAt");

/** Dead letters page by (finishedAt, id), across shards. */
export const deadLetterCursor = timedCursor((run) => run.finishedAt!, "finishedAt");

const TIMED_CURSOR = new RegExp(`^([0-9a-z]{1,12})\\.(run_[0-9A-Za-z_-]{1,${MAX_RUN_ID_LENGTH - 4}})$`);

function timedCursor<K extends string>(at: (run: RunView) => number, key: K): CursorScheme<RunView, Record<K, number> & { id: string }> {
  return {
    encode: (run) => `${at(run).toString(36)}.${run.id}`,
    decode: (cursor) => {
      const match = TIMED_CURSOR.exec(cursor);
      return match ? ({ [key]: parseInt(match[1]!, 36), id: match[2]! } as Record<K, number> & { id: string }) : null;
    },
  };
}

/**
 * One page: the cursor read (400 when it is not one of ours), `limit + 1` rows fetched after
 * it, so that whether another page follows is known without a count.
 */
export async function paged<T extends Item, Item, Position>(
  scheme: CursorScheme<Item, Position>,
  query: { limit: number; cursor?: string | undefined },
  fetch: (limit: number, after: Position | undefined) => Promise<T[]>,
): Promise<Page<T>> {
  const { limit, cursor } = query;
  let after: Position | undefined;
  if (cursor !== undefined) {
    const position = scheme.decode(cursor);
    if (position === null) throw new ApiError(400, "invalid_request", "cursor: not a cursor this API returned");
    after = position;
  }
  const rows = await fetch(limit + 1, after);
  const items = rows.slice(0, limit);
  const last = items.at(-1);
  return { items, nextCursor: rows.length > limit && last !== undefined ? scheme.encode(last) : null };
}
