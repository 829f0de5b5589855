import type { PermitAsk } from "../gate/grants";
import { permitKey } from "../gate/permit-keys";
import { groupLimits } from "../model/flow-control";
import type { RunRow } from "../protocol/stored-rows";
import { planAdmission } from "./admission";
import type { ShardHost } from "./host";
import { dispatchLeaseMs } from "./lease-length";
import { type RunLedger, TICK_BATCH } from "./ledger";
import type { ShardJob } from "./rows";
import { stoppedFor } from "./run-stops";
import type { ShardStore } from "./store";

/**
 * A run refused by its tenant's gate or by its job's maxConcurrency is woken when capacity
 * frees (the gate calls back; a run of the job ends here); this re-check is only the backstop
 * for a wake-up that was lost.
 */
const ADMISSION_RECHECK_MS = 15_000;

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
    private readonly host: Pick<ShardHost, "change" | "gateOf" | "name" | "claimTimeoutMs">,
    private readonly store: ShardStore,
    private readonly ledger: RunLedger,
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
    if (!this.store.admission.hasDueWaiting(Date.now())) return;
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
    this.store.admission.dueAllWaiting(now);
  }

  private async admitDue(): Promise<void> {
    const now = Date.now();
    const waiting = this.store.admission.waitingRuns(now, TICK_BATCH);
    if (waiting.length === 0) return;
    const jobs = new Map(this.store.getJobs([...new Set(waiting.map((r) => r.jobId))]).map((j) => [j.id, j]));
    const plan = planAdmission(waiting, jobs, (jobId) => this.store.admission.inFlightCount(jobId), now, ADMISSION_RECHECK_MS, stoppedFor);
    // A permit is granted for one admission of one run: the fence makes a later admission's
    // permit a different one, so a late release of the earlier cannot take it away. Its key
    // names what it holds (permit-keys.ts): the tenant's permit, its group's, or both.
    const permitOf = (run: RunRow) => {
      const job = jobs.get(run.jobId)!;
      const tenant = this.tenantLimit(job.tenantId) !== null;
      return permitKey({ base: `${run.id}#${run.fence}`, tenant, group: job.spec.flowControl?.key ?? null });
    };
    const gated = Map.groupBy(
      plan.candidates.filter((r) => gatedAtGate(jobs.get(r.jobId)!, this.tenantLimit(jobs.get(r.jobId)!.tenantId))),
      (r) => jobs.get(r.jobId)!.tenantId,
    );
    const answers = await Promise.all(
      [...gated].map(async ([tenantId, runs]) => {
        const limit = this.tenantLimit(tenantId);
        const leaseMs = dispatchLeaseMs(this.host.claimTimeoutMs(), 0, Math.max(...runs.map((r) => jobs.get(r.jobId)!.spec.timeoutMs)));
        // No more than the tenant's limit can be granted: asking for more only makes the gate work.
        const asks = admissionAsks(runs.slice(0, limit ?? runs.length), jobs, limit !== null, permitOf);
        try {
          return { asks, ...(await this.host.gateOf(tenantId).admit(this.host.name(), asks, limit, leaseMs)) };
        } catch (err) {
          console.error(`shard ${this.host.name()}: gate of tenant ${tenantId} unreachable; its runs wait`, err);
          return { asks, granted: [] as string[], retryAt: {} as Record<string, number> };
        }
      }),
    );
    const asked = new Set(answers.flatMap((a) => a.asks.map((x) => x.permit)));
    const granted = new Set(answers.flatMap((a) => a.granted));
    const retryAt = new Map(answers.flatMap((a) => Object.entries(a.retryAt)));
    // The admitted runs start at the change's clock, after the gate answered: a start recorded
    // at `now`, before the gate's await, could fall in a rate window before the one the gate
    // counted it in.
    this.host.change((admittedAt) => {
      for (const candidate of plan.candidates) {
        const job = jobs.get(candidate.jobId)!;
        const permit = gatedAtGate(job, this.tenantLimit(job.tenantId)) ? permitOf(candidate) : null;
        const run = this.store.getRun(candidate.id);
        const stillWaiting = run?.state === "waiting" && run.fence === candidate.fence;
        if (!stillWaiting || (permit !== null && !granted.has(permit))) {
          if (permit !== null && granted.has(permit)) this.store.permitReleases.add(permit, job.tenantId);
          // Refused: the gate wakes this shard when a place frees; a group's full rate window
          // opens at a time the gate said. Not asked yet (over the tenant's limit): left due,
          // for the next pass, which the alarm runs at once.
          if (stillWaiting && asked.has(permit!)) {
            const windowOpens = job.spec.flowControl ? retryAt.get(job.spec.flowControl.key) : undefined;
            this.store.setDueAt(run.id, Math.min(windowOpens ?? Number.POSITIVE_INFINITY, now + ADMISSION_RECHECK_MS));
          }
          continue;
        }
        this.ledger.admit(run, job, permit, admittedAt);
        if (job.spec.ratePerSecond !== undefined) this.store.admission.setRateNext(job.id, admittedAt + 1000 / job.spec.ratePerSecond);
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

/** Whether a run of this job needs its tenant's gate to start: its tenant has a limit, or it is in a flow-control group. */
function gatedAtGate(job: Pick<ShardJob, "spec">, tenantLimit: number | null): boolean {
  return tenantLimit !== null || job.spec.flowControl !== undefined;
}

/** What the gate is asked for each run, in order: its permit, whether the tenant's limit holds it, its group and that group's limits. */
function admissionAsks(
  runs: RunRow[],
  jobs: ReadonlyMap<string, Pick<ShardJob, "spec">>,
  tenant: boolean,
  permitOf: (run: RunRow) => string,
): PermitAsk[] {
  return runs.map((run) => {
    const fc = jobs.get(run.jobId)!.spec.flowControl;
    return { permit: permitOf(run), tenant, ...(fc && { group: { key: fc.key, ...groupLimits(fc) } }) };
  });
}
