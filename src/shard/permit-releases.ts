/**
 * Tenant permits that runs gave back, sent to their gates after commit (dispatch.ts). Kept in
 * memory, like dispatches, not written down: a row per release (its insert and its delete)
 * would cost more than the run's own writes on a tenant's path (docs/cost.md). A release lost
 * with the object (a crash or an eviction between commit and send) is made up by the permit's
 * lease: the gate drops the permit when it ends (docs/architecture.md, invariant 5), so the
 * place comes back at most one permit lease late, and never twice (a permit names its run and
 * fence: invariant 4). A change that rolls back takes its releases with it (`mark`/`rollBack`).
 */
export class PermitReleases {
  private pendingReleases: Array<{ permit: string; tenantId: string }> = [];
  /** Whether rows a release before this one left in `permit_releases` may still be there: read once. */
  private legacyRows = true;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  /** A permit to give back to its tenant's gate after commit. */
  add(permit: string, tenantId: string): void {
    this.pendingReleases.push({ permit, tenantId });
  }

  /** A run's permit, given back to the tenant of its job. */
  addForJob(permit: string, jobId: string): void {
    const tenantId = this.sql.exec("SELECT tenant_id FROM jobs WHERE id = ?", jobId).toArray()[0]?.tenant_id;
    if (typeof tenantId === "string") this.add(permit, tenantId);
  }

  /** Releases not yet sent. */
  any(): boolean {
    return this.pendingReleases.length > 0 || this.legacyRows;
  }

  /** Where the list ends before a change; `rollBack(mark)` forgets what a failed change added. */
  mark(): number {
    return this.pendingReleases.length;
  }

  rollBack(mark: number): void {
    this.pendingReleases.length = Math.min(mark, this.pendingReleases.length);
  }

  /** Up to `limit` releases to send, taken off the list: one its gate did not take goes back with `putBack`. */
  take(limit: number): Array<{ permit: string; tenantId: string }> {
    this.takeLegacyRows();
    return this.pendingReleases.splice(0, limit);
  }

  putBack(releases: Array<{ permit: string; tenantId: string }>): void {
    this.pendingReleases.unshift(...releases);
  }

  /** Releases an earlier release of the code wrote down and did not send: into memory, once, and their rows gone. */
  private takeLegacyRows(): void {
    if (!this.legacyRows) return;
    this.legacyRows = false;
    const rows = this.sql.exec("SELECT permit, tenant_id FROM permit_releases").toArray();
    if (rows.length === 0) return;
    this.pendingReleases.push(...rows.map((r) => ({ permit: r.permit as string, tenantId: r.tenant_id as string })));
    this.sql.exec("DELETE FROM permit_releases");
  }
}
