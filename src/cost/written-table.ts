/**
 * The table a SQL statement writes, for the cost meter's rows written by table; null for a
 * statement that only reads. The rows a statement writes count against the table it names, its
 * index entries and its triggers' writes included: the figure says which statement to look at.
 * Written by hand: the meter needs the first table a statement writes, which a regular
 * expression over our own statements (never user input) finds without a SQL parser's weight.
 */
const WRITE =
  /^\s*(?:WITH\b[\s\S]*?\)\s*)?(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)\s+["`]?(\w+)/i;

export function writtenTable(query: string): string | null {
  return WRITE.exec(query)?.[1] ?? null;
}

/** A setAlarm is billed as a row written (Durable Objects pricing): counted under this name. */
export const ALARM_TABLE = "(setAlarm)";
