import { chunksForStatement, placeholders } from "../sql";
import type { NotificationRow } from "./rows";

/** The SQL of the notifications outbox (notifier.ts), one named operation per statement. */
export class NotificationStore {
  /**
   * False once a read found the outbox empty, until the next add: the alarm asks for the
   * earliest after every call, and most shards never hold a notification.
   */
  private mayHoldAny = true;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** A notification, once: a repeated step (the same id) adds nothing. True if it is new. */
  add(n: Omit<NotificationRow, "sends">): boolean {
    this.mayHoldAny = true;
    return (
      this.sql
        .exec(
          `INSERT INTO notifications (id, kind, job_id, tenant_id, url, body, due_at) VALUES (?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (id) DO NOTHING RETURNING id`,
          n.id,
          n.kind,
          n.jobId,
          n.tenantId,
          n.url,
          n.body,
          n.dueAt,
        )
        .toArray().length > 0
    );
  }

  due(now: number, limit: number): NotificationRow[] {
    return this.sql
      .exec("SELECT * FROM notifications WHERE due_at <= ? ORDER BY due_at LIMIT ?", now, limit)
      .toArray()
      .map((r) => ({
        kind: r.kind as NotificationRow["kind"],
        id: r.id as string,
        jobId: r.job_id as string,
        tenantId: r.tenant_id as string,
        url: r.url as string,
        body: r.body as string,
        dueAt: r.due_at as number,
        sends: r.sends as number,
      }));
  }

  /** It is sent again: at `dueAt` it is looked at once more unless delivered. */
  sent(id: string, dueAt: number): void {
    this.sql.exec("UPDATE notifications SET due_at = ?, sends = sends + 1 WHERE id = ?", dueAt, id);
  }

  remove(ids: string[]): void {
    for (const chunk of chunksForStatement(ids))
      this.sql.exec(`DELETE FROM notifications WHERE id IN (${placeholders(chunk.length)})`, ...chunk);
  }

  earliest(): number | null {
    if (!this.mayHoldAny) return null;
    const t = this.sql.exec("SELECT MIN(due_at) AS t FROM notifications").one().t as number | null;
    this.mayHoldAny = t !== null;
    return t;
  }
}
