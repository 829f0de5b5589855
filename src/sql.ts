/**
 * SQL helpers shared by the shard, the tenant gate and the D1 catalog. SQLite in a Durable
 * Object and D1 both bind at most 100 parameters per statement: a query over a list of ids must
 * be asked in chunks, and this is the one place that knows how big a chunk may be.
 */
export const MAX_BOUND_PARAMETERS = 100;

/** `items` in lists that each fit one statement beside `reserved` other bound parameters. */
export function chunksForStatement<T>(items: readonly T[], reserved = 0): T[][] {
  const size = MAX_BOUND_PARAMETERS - reserved;
  if (size < 1) throw new Error(`a statement with ${reserved} other parameters has no room for a list`);
  return chunksOf(items, size);
}

/** `items` in lists of `size` (the last may be shorter). */
export function chunksOf<T>(items: readonly T[], size: number): T[][] {
  const chunks: T[][] = [];
  for (let i = 0; i < items.length; i += size) chunks.push(items.slice(i, i + size));
  return chunks;
}

/** `?, ?, ?` for a list of `n` bound parameters. */
export const placeholders = (n: number): string => Array.from({ length: n }, () => "?").join(", ");

/**
 * The rows of a query over a list of values in a Durable Object's SQLite, asked in as many
 * statements as the bound-parameter limit needs: `query` is given each chunk's `?, ?, …`.
 */
export function rowsForList(
  sql: Pick<SqlStorage, "exec">,
  values: readonly SqlStorageValue[],
  query: (list: string) => string,
): Record<string, SqlStorageValue>[] {
  return chunksForStatement(values).flatMap((chunk) => sql.exec(query(placeholders(chunk.length)), ...chunk).toArray());
}
