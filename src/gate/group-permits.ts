import type { GroupLimits } from "../model/flow-control";
import { chunksForStatement, placeholders } from "../sql";
import type { GrantDecision, GroupState } from "./grants";

/**
 * A tenant gate's flow-control groups (src/model/flow-control.ts), in the gate's own SQLite: the
 * permits of each group's runs in flight (leased like the tenant's), each group's current rate
 * window, the shards waiting for a group's permit, and limits set for a group itself (a QStash
 * queue's parallelism). A tenant whose jobs name no group writes none of these.
 */
export const GROUP_SCHEMA = `
  CREATE TABLE IF NOT EXISTS group_permits (permit TEXT PRIMARY KEY, grp TEXT NOT NULL, shard TEXT NOT NULL, expires_at INTEGER NOT NULL);
  CREATE INDEX IF NOT EXISTS group_permits_by_group ON group_permits (grp);
  CREATE TABLE IF NOT EXISTS group_windows (grp TEXT PRIMARY KEY, window_start INTEGER NOT NULL, started INTEGER NOT NULL) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS group_waiters (grp TEXT NOT NULL, shard TEXT NOT NULL, wanted INTEGER NOT NULL, since INTEGER NOT NULL, PRIMARY KEY (grp, shard)) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS group_limits (grp TEXT PRIMARY KEY, limits TEXT NOT NULL) WITHOUT ROWID;
`;

/** A window row written before windows kept their end: dropped once past the longest period. */
const LONGEST_PERIOD_MS = 7 * 86_400_000;

export class GroupPermits {
  constructor(private readonly sql: SqlStorage) {
    // Windows keep their end, so that an idle group's row goes once its window is over: keys are
    // the client's to choose (Upstash-Flow-Control-Key), one row each would otherwise stay for ever.
    if (this.sql.exec("SELECT 1 FROM pragma_table_info('group_windows') WHERE name = 'ends_at'").toArray().length === 0)
      this.sql.exec("ALTER TABLE group_windows ADD COLUMN ends_at INTEGER");
    this.sql.exec("CREATE INDEX IF NOT EXISTS group_windows_by_end ON group_windows (ends_at)");
  }

  /** What a grant decision needs of each group: its permits held, its window, its own limits. */
  states(groups: Iterable<string>): Map<string, GroupState> {
    const out = new Map<string, GroupState>();
    for (const grp of groups) {
      const inFlight = this.sql.exec("SELECT COUNT(*) AS n FROM group_permits WHERE grp = ?", grp).one().n as number;
      const w = this.sql.exec("SELECT window_start, started FROM group_windows WHERE grp = ?", grp).toArray()[0];
      out.set(grp, {
        inFlight,
        windowStart: (w?.window_start as number | undefined) ?? 0,
        started: (w?.started as number | undefined) ?? 0,
        override: this.limitsOf(grp),
      });
    }
    return out;
  }

  held(permits: string[]): Set<string> {
    const held = new Set<string>();
    for (const chunk of chunksForStatement(permits))
      for (const row of this.sql.exec(`SELECT permit FROM group_permits WHERE permit IN (${placeholders(chunk.length)})`, ...chunk))
        held.add(row.permit as string);
    return held;
  }

  /** Writes what `decideGrants` granted of groups, and the shards that must wait for a group. */
  apply(
    shard: string,
    taken: Array<{ permit: string; group: string }>,
    d: GrantDecision,
    before: Map<string, GroupState>,
    until: number,
    now: number,
  ): void {
    for (const { permit, group } of taken)
      this.sql.exec(
        "INSERT INTO group_permits (permit, grp, shard, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT (permit) DO UPDATE SET expires_at = excluded.expires_at",
        permit,
        group,
        shard,
        until,
      );
    for (const [grp, g] of d.groups) {
      const was = before.get(grp);
      if (was && was.windowStart === g.windowStart && was.started === g.started) continue;
      this.sql.exec(
        "INSERT INTO group_windows (grp, window_start, started, ends_at) VALUES (?, ?, ?, ?) ON CONFLICT (grp) DO UPDATE SET window_start = excluded.window_start, started = excluded.started, ends_at = excluded.ends_at",
        grp,
        g.windowStart,
        g.started,
        g.windowEnd ?? g.windowStart + LONGEST_PERIOD_MS,
      );
    }
    for (const [grp, wanted] of d.groupRefused)
      this.sql.exec(
        "INSERT INTO group_waiters (grp, shard, wanted, since) VALUES (?, ?, ?, ?) ON CONFLICT (grp, shard) DO UPDATE SET wanted = excluded.wanted",
        grp,
        shard,
        wanted,
        now,
      );
  }

  renew(permit: string, group: string, shard: string, until: number): void {
    this.sql.exec(
      `INSERT INTO group_permits (permit, grp, shard, expires_at) VALUES (?1, ?2, ?3, ?4)
       ON CONFLICT (permit) DO UPDATE SET expires_at = MAX(expires_at, excluded.expires_at)`,
      permit,
      group,
      shard,
      until,
    );
  }

  /** Gives a permit back: the group it freed a place in, or null when it held none. */
  release(permit: string): string | null {
    const row = this.sql.exec("DELETE FROM group_permits WHERE permit = ? RETURNING grp", permit).toArray()[0];
    return (row?.grp as string | undefined) ?? null;
  }

  /**
   * Drops the permits whose lease ran out (how many each group lost), and the rate windows that
   * are over: a group absent starts its next window at 0, as it would have. A range of the index
   * on ends_at; rows from before it kept ends_at go a longest period after their start.
   */
  expire(now: number): Map<string, number> {
    this.sql.exec("DELETE FROM group_windows WHERE ends_at <= ?", now);
    this.sql.exec("DELETE FROM group_windows WHERE ends_at IS NULL AND window_start <= ?", now - LONGEST_PERIOD_MS);
    const freed = new Map<string, number>();
    for (const r of this.sql.exec("DELETE FROM group_permits WHERE expires_at <= ? RETURNING grp", now).toArray())
      freed.set(r.grp as string, (freed.get(r.grp as string) ?? 0) + 1);
    return freed;
  }

  /** The longest-waiting shards of `grp`, as many as can use `freed` places; their rows go. */
  takeWaiters(grp: string, freed: number): string[] {
    const woken: string[] = [];
    let covered = 0;
    for (const row of this.sql.exec("SELECT shard, wanted FROM group_waiters WHERE grp = ? ORDER BY since", grp).toArray()) {
      if (covered >= freed) break;
      woken.push(row.shard as string);
      covered += row.wanted as number;
    }
    for (const shard of woken) this.sql.exec("DELETE FROM group_waiters WHERE grp = ? AND shard = ?", grp, shard);
    return woken;
  }

  waitingGroups(): string[] {
    return this.sql
      .exec("SELECT DISTINCT grp FROM group_waiters")
      .toArray()
      .map((r) => r.grp as string);
  }

  earliestExpiry(): number | null {
    return this.sql.exec("SELECT MIN(expires_at) AS t FROM group_permits").one().t as number | null;
  }

  /** Runs refused a place in each group, as their shards last said, and its runs in flight. */
  figures(groups: string[]): Record<string, { inFlight: number; waiting: number }> {
    const out: Record<string, { inFlight: number; waiting: number }> = {};
    for (const grp of groups) {
      const inFlight = this.sql.exec("SELECT COUNT(*) AS n FROM group_permits WHERE grp = ?", grp).one().n as number;
      const waiting = this.sql.exec("SELECT COALESCE(SUM(wanted), 0) AS n FROM group_waiters WHERE grp = ?", grp).one().n as number;
      out[grp] = { inFlight, waiting };
    }
    return out;
  }

  limitsOf(grp: string): GroupLimits | null {
    const row = this.sql.exec("SELECT limits FROM group_limits WHERE grp = ?", grp).toArray()[0];
    return row ? (JSON.parse(row.limits as string) as GroupLimits) : null;
  }

  /** Sets the group's own limits (null: its jobs' again). */
  setLimits(grp: string, limits: GroupLimits | null): void {
    if (limits === null) this.sql.exec("DELETE FROM group_limits WHERE grp = ?", grp);
    else
      this.sql.exec(
        "INSERT INTO group_limits (grp, limits) VALUES (?, ?) ON CONFLICT (grp) DO UPDATE SET limits = excluded.limits",
        grp,
        JSON.stringify(limits),
      );
  }
}
