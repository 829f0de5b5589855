/**
 * The permit releases outbox: tenant permits that runs gave back, written in the step's own
 * transaction and sent to the tenant's gate after commit (dispatch.ts), then removed.
 */
export class PermitReleases {
  /**
   * Whether the outbox may hold any: read when not known, set by every write that adds one (a
   * write that rolled back leaves it set, which costs a statement, never a miss), cleared only
   * by a read that finds none. A shard whose tenants have no limit so skips the statement that
   * looks for them after every call.
   */
  private mayHoldAny: boolean | undefined;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** A permit to give back to its tenant's gate after commit. */
  add(permit: string, tenantId: string): void {
    this.mayHoldAny = true;
    this.sql.exec("INSERT INTO permit_releases (permit, tenant_id) VALUES (?, ?) ON CONFLICT DO NOTHING", permit, tenantId);
  }

  /** A run's permit, given back to the tenant of its job. */
  addForJob(permit: string, jobId: string): void {
    this.mayHoldAny = true;
    this.sql.exec(
      "INSERT INTO permit_releases (permit, tenant_id) SELECT ?, tenant_id FROM jobs WHERE id = ? ON CONFLICT DO NOTHING",
      permit,
      jobId,
    );
  }

  /** Releases committed and not yet sent. */
  any(): boolean {
    if (this.mayHoldAny === false) return false;
    const any = this.sql.exec("SELECT 1 FROM permit_releases LIMIT 1").toArray().length > 0;
    // Only "none at all" is kept from a read; once there were some, every later call reads.
    this.mayHoldAny = any;
    return any;
  }

  /**
   * Up to `limit` releases to send. Asked at every flush, and a busy shard flushes several times
   * a call: without the flag this read was the shard's second costliest statement in the steady
   * workload's profile (bench --profile), for a table that is empty without tenant limits.
   */
  pending(limit: number): Array<{ permit: string; tenantId: string }> {
    if (this.mayHoldAny === false) return [];
    const rows = this.sql.exec("SELECT permit, tenant_id FROM permit_releases LIMIT ?", limit).toArray();
    this.mayHoldAny = rows.length > 0;
    return rows.map((r) => ({ permit: r.permit as string, tenantId: r.tenant_id as string }));
  }

  remove(permits: string[]): void {
    for (const permit of permits) this.sql.exec("DELETE FROM permit_releases WHERE permit = ?", permit);
  }
}
