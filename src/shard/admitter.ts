import { LEASE_GRACE_MS } from "../protocol/queue-messages";
import type { RunRow } from "../protocol/stored-rows";
import { planAdmission } from "./admission";
import { type RunLedger, TICK_BATCH } from "./ledger";
import { stoppedFor } from "./run-stops";
import type { ShardStore } from "./store";

/**
 * A run refused by its tenant's gate or by its job's maxConcurrency is woken when capacity
 * frees (the gate calls back; a run of the job ends here); this re-check is only the backstop
 * for a wake-up that was lost.
 */
const ADMISSION_RECHECK_MS = 15_000;

/** What admission needs of a tenant's gate (a TenantGate Durable Object). */
export interface PermitGate {
  acquire(shard: string, permits: string[], limit: number, leaseMs: number): Promise<string[]>;
}

/**
 * Admission: waiting runs start as far as flow control allows. The jobs' own limits are decided
 * here (pure, in `planAdmission`), then the tenants' gates grant permits across shards, then one
 * transaction moves the admitted runs to `queued` with their dispatches.
 */
export class Admitter {
  /** The admission under way: two interleaved at the gate's await would both admit one run. */
  private running: Promise<void> | null = null;
  /** A change made while an admission was under way may have made more runs admissible. */
  private again = false;

  constructor(
    private readonly store: ShardStore,
    private readonly ledger: RunLedger,
    private readonly transaction: <T>(change: () => T) => T,
    private readonly gateOf: (tenantId: string) => PermitGate,
    private readonly shardName: () => string,
    private readonly claimTimeoutMs: () => number,
  ) {}

  /**
   * Admits what is due. A call made while an admission is under way joins it, and that
   * admission runs once more for what the call's change made due; so a caller that returns
   * from here has had its own waiting runs looked at.
   */
  async admit(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    if (!this.store.hasDueWaiting(Date.now())) return;
    // The loop's last check and the release happen in one synchronous step, so a call that
    // joins can never land after the check and be left out.
    this.running = (async () => {
      try {
        do {
          this.again = false;
          await this.admitDue();
        } while (this.again);
      } finally {
        this.running = null;
      }
    })();
    return this.running;
  }

  /** A tenant's gate says capacity freed: every waiting run is looked at now. */
  wakeAll(now: number): void {
    this.store.dueAllWaiting(now);
  }

  private async admitDue(): Promise<void> {
    const now = Date.now();
    const waiting = this.store.waitingRuns(now, TICK_BATCH);
    if (waiting.length === 0) return;
    const jobs = new Map(this.store.getJobs([...new Set(waiting.map((r) => r.jobId))]).map((j) => [j.id, j]));
    const plan = planAdmission(waiting, jobs, (jobId) => this.store.inFlightCount(jobId), now, ADMISSION_RECHECK_MS, stoppedFor);
    // A permit is granted for one admission of one run: the fence makes a later admission's
    // permit a different one, so a late release of the earlier cannot take it away.
    const permitOf = (run: RunRow) => `${run.id}#${run.fence}`;
    const asked = new Set<string>();
    const granted = new Set<string>();
    const gated = Map.groupBy(
      plan.candidates.filter((r) => this.tenantLimit(jobs.get(r.jobId)!.tenantId) !== null),
      (r) => jobs.get(r.jobId)!.tenantId,
    );
    await Promise.all(
      [...gated].map(async ([tenantId, runs]) => {
        const leaseMs = this.claimTimeoutMs() + Math.max(...runs.map((r) => jobs.get(r.jobId)!.spec.timeoutMs)) + LEASE_GRACE_MS;
        const limit = this.tenantLimit(tenantId)!;
        try {
          // No more than the limit can be granted: asking for more only makes the gate work.
          const ask = runs.slice(0, limit).map(permitOf);
          for (const permit of ask) asked.add(permit);
          const permits = await this.gateOf(tenantId).acquire(this.shardName(), ask, limit, leaseMs);
          for (const permit of permits) granted.add(permit);
        } catch (err) {
          console.error(`shard ${this.shardName()}: gate of tenant ${tenantId} unreachable; its runs wait`, err);
        }
      }),
    );
    this.transaction(() => {
      for (const candidate of plan.candidates) {
        const job = jobs.get(candidate.jobId)!;
        const permit = gated.has(job.tenantId) ? permitOf(candidate) : null;
        const run = this.store.getRun(candidate.id);
        const stillWaiting = run?.state === "waiting" && run.fence === candidate.fence;
        if (!stillWaiting || (permit !== null && !granted.has(permit))) {
          if (permit !== null && granted.has(permit)) this.store.permitReleases.add(permit, job.tenantId);
          // Refused: the gate wakes this shard when capacity frees. Not asked yet (over the
          // limit): left due, for the next pass, which the alarm runs at once.
          if (stillWaiting && asked.has(permit!)) this.store.setDueAt(run.id, now + ADMISSION_RECHECK_MS);
          continue;
        }
        this.ledger.admit(run, job, permit, now);
        if (job.spec.ratePerSecond !== undefined) this.store.setRateNext(job.id, now + 1000 / job.spec.ratePerSecond);
      }
      for (const { run, dueAt } of plan.deferred) {
        if (this.store.getRun(run.id)?.state === "waiting") this.store.setDueAt(run.id, dueAt);
      }
    });
  }

  private tenantLimit(tenantId: string): number | null {
    return this.store.getTenant(tenantId)?.maxRunsInFlight ?? null;
  }
}
