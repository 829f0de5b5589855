import { chunksForStatement, placeholders } from "../sql";

/**
 * A tenant's runs-in-flight permits (the gate's `permits` table, a row each, `WITHOUT ROWID`),
 * with how many are held and the earliest lease end kept in memory: every `admit` asks both, and
 * counting the table or scanning it for lapsed leases at each call read the whole tenant's
 * permits, up to its limit, per call (thousands of rows a call under a steady load at the limit).
 * Memory is only a summary of the table: unknown after a start or a rolled-back change, it is
 * read again once (`forget`).
 */
export class TenantPermits {
  #count: number | undefined;
  /** No lease ends before this (it may be earlier than the earliest that remains: then a look finds none to drop). */
  #earliest: number | null | undefined;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** Memory may not match the table (a change rolled back): read again when next needed. */
  forget(): void {
    this.#count = undefined;
    this.#earliest = undefined;
  }

  /** Drops the permits whose lease ended by `now`; how many. Reads the table only when one may have. */
  expire(now: number): number {
    this.summary();
    if (this.#earliest === null || (this.#earliest as number) > now) return 0;
    const freed = this.sql.exec("DELETE FROM permits WHERE expires_at <= ?", now).rowsWritten;
    this.forget();
    return freed;
  }

  count(): number {
    return this.summary().count;
  }

  earliest(): number | null {
    return this.summary().earliest;
  }

  /** Which of `permits` are held. */
  held(permits: string[]): Set<string> {
    const held = new Set<string>();
    for (const chunk of chunksForStatement(permits)) {
      const rows = this.sql.exec(`SELECT permit FROM permits WHERE permit IN (${placeholders(chunk.length)})`, ...chunk).toArray();
      for (const row of rows) held.add(row.permit as string);
    }
    return held;
  }

  /** Takes `permit` (new, or held already: `wasHeld`) for `shard` until `until`. */
  take(permit: string, shard: string, until: number, wasHeld: boolean): void {
    this.summary();
    this.sql.exec(
      "INSERT INTO permits (permit, shard, expires_at) VALUES (?, ?, ?) ON CONFLICT (permit) DO UPDATE SET expires_at = excluded.expires_at",
      permit,
      shard,
      until,
    );
    if (!wasHeld && this.#count !== undefined) this.#count++;
    this.noteEnd(until);
  }

  /** Extends `permit` to `until` at least, taking it again if it lapsed: whether it was, is not known here, so the count is read again. */
  renew(permit: string, shard: string, until: number): void {
    this.sql.exec(
      `INSERT INTO permits (permit, shard, expires_at) VALUES (?1, ?2, ?3)
       ON CONFLICT (permit) DO UPDATE SET expires_at = MAX(expires_at, excluded.expires_at)`,
      permit,
      shard,
      until,
    );
    this.#count = undefined;
    this.noteEnd(until);
  }

  /** Gives `permit` back; whether it was held. */
  release(permit: string): boolean {
    const freed = this.sql.exec("DELETE FROM permits WHERE permit = ?", permit).rowsWritten > 0;
    if (freed && this.#count !== undefined) this.#count--;
    return freed;
  }

  private noteEnd(until: number): void {
    if (this.#earliest !== undefined && (this.#earliest === null || until < this.#earliest)) this.#earliest = until;
  }

  private summary(): { count: number; earliest: number | null } {
    if (this.#count === undefined || this.#earliest === undefined) {
      const row = this.sql.exec("SELECT COUNT(*) AS n, MIN(expires_at) AS t FROM permits").one();
      this.#count = row.n as number;
      this.#earliest = (row.t as number | null) ?? null;
    }
    return { count: this.#count, earliest: this.#earliest };
  }
}
