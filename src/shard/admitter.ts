import type { PermitAsk } from "../gate/grants";
import { permitKey } from "../gate/permit-keys";
import { groupLimits } from "../model/flow-control";
import type { RunRow, TenantSettings } from "../protocol/stored-rows";
import { planAdmission } from "./admission";
import type { ShardHost } from "./host";
import { dispatchLeaseMs } from "./lease-length";
import { type RunLedger, TICK_BATCH } from "./ledger";
import type { ShardJob } from "./rows";
import { stoppedFor } from "./run-stops";
import type { ShardStore } from "./store";

/**
 * A run refused by its job's maxConcurrency, or by a flow-control group, is woken when capacity
 * frees (a run of the job ends here; the gate calls back); this re-check is only the backstop
 * for a wake-up that was lost. It is also the first backstop of a tenant with parked runs.
 */
const ADMISSION_RECHECK_MS = 15_000;
/** A parked tenant's backstop doubles while its re-checks admit nothing (its gate still full, or failing), up to this. */
const PARKED_RECHECK_MAX_MS = 5 * 60_000;

/**
 * Admission: waiting runs start as far as flow control allows. The jobs' own limits are decided
 * here (pure, in `planAdmission`), then the tenants' gates grant permits across shards, then one
 * transaction moves the admitted runs to `queued` with their dispatches.
 *
 * A run its tenant's runs-in-flight limit refuses is parked (admission-store.ts): no due time,
 * so no alarm reads it again, queued under its tenant in the order it came due; a run of that
 * tenant that comes due later (a new run, a retry) joins the tail without asking the gate, so
 * places go to the oldest first. The gate remembers the shard and, as permits free, offers it
 * places (`offer`): a pass reads that many parked runs and asks for them. A backlog so costs
 * rows per run admitted, not per run waiting: a run is read once as it comes due and parks,
 * once more when a place is offered to it.
 */
export class Admitter {
  /** The admission under way: two interleaved at the gate's await would both admit one run. */
  private running: Promise<void> | null = null;
  /** A change made while an admission was under way may have made more runs admissible. */
  private again = false;
  /**
   * Places tenants' gates offered and no pass has used yet, by tenant. In memory: an offer lost
   * with the object is made up by the tenant's backstop re-check (`admission_waits`).
   */
  private readonly offered = new Map<string, number>();

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
    const now = Date.now();
    if (this.offered.size === 0 && !this.store.admission.hasDueWaiting(now) && !((this.store.admission.earliestWait() ?? now + 1) <= now))
      return;
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

  /**
   * Asks the tenants' gates, before a fire, for the permits of the runs it is about to make
   * (`runs`, from `Firing.runsDue`): a run granted one is made dispatched with it, in the fire's
   * own write, instead of being written `waiting` and admitted by a second write (docs/cost.md).
   * Only a run its tenant's limit alone would hold (no job limit, rate or group of its own, not a
   * workflow's), and only while its tenant has no runs parked here, which come first. The rest
   * are made as before. A gate that fails grants nothing: those runs wait as before. Returns the
   * permits by run id, and by tenant for giving back what the fire does not use.
   */
  async grantAhead(runs: Array<{ job: ShardJob; runIds: string[] }>): Promise<Map<string, { permit: string; tenantId: string }>> {
    const granted = new Map<string, { permit: string; tenantId: string }>();
    const waits = runs.length === 0 ? new Map() : this.store.admission.waits();
    const eligible = runs.filter(({ job }) => {
      const { spec } = job;
      if (this.tenantLimit(job.tenantId) === null || waits.has(job.tenantId) || job.paused || job.deleted) return false;
      return (
        spec.steps === undefined && spec.maxConcurrency === undefined && spec.ratePerSecond === undefined && spec.flowControl === undefined
      );
    });
    // A run that exists already is not made again (its id is derived): it needs no permit.
    const existing = new Set(this.store.getRuns(eligible.flatMap((r) => r.runIds)).map((r) => r.id));
    const byTenant = new Map<string, Array<{ job: ShardJob; runId: string }>>();
    for (const { job, runIds } of eligible) {
      const limit = this.tenantLimit(job.tenantId)!;
      const list = byTenant.get(job.tenantId) ?? [];
      for (const runId of runIds) if (list.length < limit && !existing.has(runId)) list.push({ job, runId });
      byTenant.set(job.tenantId, list);
    }
    await Promise.all(
      [...byTenant]
        .filter(([, list]) => list.length > 0)
        .map(async ([tenantId, list]) => {
          // A new run's first fence is 1 (fire-store.ts, `createRun`): its permit names it.
          const permits = new Map(list.map(({ runId }) => [permitKey({ base: `${runId}#1`, tenant: true, group: null }), runId]));
          const leaseMs = dispatchLeaseMs(this.host.claimTimeoutMs(), 0, Math.max(...list.map(({ job }) => job.spec.timeoutMs)));
          try {
            const answer = await this.host.gateOf(tenantId).admit(
              this.host.name(),
              [...permits.keys()].map((permit) => ({ permit, tenant: true })),
              this.tenantLimit(tenantId),
              leaseMs,
            );
            for (const permit of answer.granted) granted.set(permits.get(permit)!, { permit, tenantId });
          } catch (err) {
            console.error(`shard ${this.host.name()}: gate of tenant ${tenantId} unreachable before a fire; its runs wait`, err);
          }
        }),
    );
    return granted;
  }

  /** A flow-control group's place freed: the waiting runs deferred to later are looked at now (parked ones are their tenants'). */
  wakeAll(now: number): void {
    this.store.admission.dueAllWaiting(now);
  }

  /** A tenant's gate offers `places`: as many of its parked runs here are asked for, oldest first, by the next pass. */
  offer(tenantId: string, places: number): void {
    this.offered.set(tenantId, (this.offered.get(tenantId) ?? 0) + Math.max(1, Math.floor(places)));
  }

  /**
   * Tenants' settings changed: a limit taken away leaves nothing to park for (every parked run
   * of the tenant is due now, once); a limit set or raised offers as many places as it allows.
   */
  tenantsChanged(tenants: ReadonlyArray<Pick<TenantSettings, "id" | "maxRunsInFlight">>, now: number): void {
    for (const t of tenants) {
      if (t.maxRunsInFlight === null) {
        this.store.admission.unparkAll(t.id, now);
        this.store.admission.endWait(t.id);
      } else if (this.store.admission.waits().has(t.id)) this.offer(t.id, t.maxRunsInFlight);
    }
    this.wakeAll(now);
  }

  /** When admission next has work beyond the waiting runs' due times: now for an offer not used, else a parked tenant's backstop. */
  nextDue(now: number): number | null {
    return this.offered.size > 0 ? now : this.store.admission.earliestWait();
  }

  private async admitDue(): Promise<void> {
    const now = Date.now();
    const admission = this.store.admission;
    const fresh = admission.waitingRuns(now, TICK_BATCH);
    const waits = admission.waits();
    // A backstop come due offers one place: if the gate has more, the pass that gets it asks again.
    for (const [tenantId, w] of waits) if (w.recheckAt <= now && !this.offered.has(tenantId)) this.offered.set(tenantId, 1);
    const offered = new Map(this.offered);
    this.offered.clear();
    const heads = [...offered].flatMap(([tenantId, places]) => admission.parkedHead(tenantId, places));
    const touched = new Set(offered.keys());
    if (fresh.length === 0 && heads.length === 0) {
      this.host.change(() => {
        for (const tenantId of touched) if (waits.has(tenantId) && !admission.hasParked(tenantId)) admission.endWait(tenantId);
      });
      return;
    }
    const jobs = new Map(this.store.getJobs([...new Set([...fresh, ...heads].map((r) => r.jobId))]).map((j) => [j.id, j]));
    // A run that came due for a tenant with runs parked here joins their tail: a place that
    // frees goes to the run waiting longest, a retry included, in the order they came due.
    const joining: RunRow[] = [];
    const looked: RunRow[] = [...heads];
    for (const run of fresh) {
      const job = jobs.get(run.jobId);
      // A workflow's step holds its run's permit (gatedAtGate): it never queues for one of its own.
      const queues = job !== undefined && run.parentRunId === null && this.tenantLimit(job.tenantId) !== null;
      if (queues && waits.has(job.tenantId) && stoppedFor(run, job) === null) joining.push(run);
      else looked.push(run);
    }
    for (const run of joining) touched.add(jobs.get(run.jobId)!.tenantId);
    // A parked run whose job was paused or deleted since is cancelled here: it has no due time
    // for the alarm to find it by, and left at the head it would take an offered place each time.
    const stoppedHeads = heads.filter((r) => stoppedFor(r, jobs.get(r.jobId) ?? null) !== null);
    const plan = planAdmission(looked, jobs, (jobId) => admission.inFlightCount(jobId), now, ADMISSION_RECHECK_MS, stoppedFor);
    // A permit is granted for one admission of one run: the fence makes a later admission's
    // permit a different one, so a late release of the earlier cannot take it away. Its key
    // names what it holds (permit-keys.ts): the tenant's permit, its group's, or both.
    const permitOf = (run: RunRow) => {
      const job = jobs.get(run.jobId)!;
      const tenant = this.tenantLimit(job.tenantId) !== null;
      return permitKey({ base: `${run.id}#${run.fence}`, tenant, group: job.spec.flowControl?.key ?? null });
    };
    const gated = Map.groupBy(
      plan.candidates.filter((r) => gatedAtGate(r, jobs.get(r.jobId)!, this.tenantLimit(jobs.get(r.jobId)!.tenantId))),
      (r) => jobs.get(r.jobId)!.tenantId,
    );
    const joiningOf = Map.groupBy(joining, (r) => jobs.get(r.jobId)!.tenantId);
    const answers = new Map(
      await Promise.all(
        [...gated].map(async ([tenantId, runs]): Promise<[string, GateAnswer]> => {
          touched.add(tenantId);
          const limit = this.tenantLimit(tenantId);
          const leaseMs = dispatchLeaseMs(this.host.claimTimeoutMs(), 0, Math.max(...runs.map((r) => jobs.get(r.jobId)!.spec.timeoutMs)));
          // No more than the tenant's limit can be granted: asking for more only makes the gate work.
          const asks = admissionAsks(runs.slice(0, limit ?? runs.length), jobs, limit !== null, permitOf);
          const alsoWaiting = runs.length - asks.length + (joiningOf.get(tenantId)?.length ?? 0);
          try {
            const answer = await this.host.gateOf(tenantId).admit(this.host.name(), asks, limit, leaseMs, alsoWaiting);
            return [tenantId, { asks, failed: false, ...answer }];
          } catch (err) {
            console.error(`shard ${this.host.name()}: gate of tenant ${tenantId} unreachable; its runs wait`, err);
            return [tenantId, { asks, failed: true, granted: [], retryAt: {}, tenantRefused: 0 }];
          }
        }),
      ),
    );
    const asked = new Set([...answers.values()].flatMap((a) => a.asks.map((x) => x.permit)));
    const granted = new Set([...answers.values()].flatMap((a) => a.granted));
    const retryAt = new Map([...answers.values()].flatMap((a) => Object.entries(a.retryAt)));
    // The admitted runs start at the change's clock, after the gate answered: a start recorded
    // at `now`, before the gate's await, could fall in a rate window before the one the gate
    // counted it in.
    this.host.change((admittedAt) => {
      const admitted = new Map<string, number>();
      const parked = new Set<string>();
      const more = new Set<string>();
      const park = (run: RunRow, tenantId: string) => {
        parked.add(tenantId);
        if (run.dueAt !== null) admission.park(run.id, tenantId, run.dueAt);
      };
      for (const run of joining) park(run, jobs.get(run.jobId)!.tenantId);
      for (const head of stoppedHeads) {
        const run = this.store.getRun(head.id);
        const stopped = run?.state === "waiting" ? stoppedFor(run, jobs.get(run.jobId) ?? null) : null;
        if (run && stopped) this.ledger.cancel(run, stopped, admittedAt);
      }
      for (const candidate of plan.candidates) {
        const job = jobs.get(candidate.jobId)!;
        const permit = gatedAtGate(candidate, job, this.tenantLimit(job.tenantId)) ? permitOf(candidate) : null;
        const run = this.store.getRun(candidate.id);
        const stillWaiting = run?.state === "waiting" && run.fence === candidate.fence;
        if (!stillWaiting || (permit !== null && !granted.has(permit))) {
          if (permit !== null && granted.has(permit)) this.store.permitReleases.add(permit, job.tenantId);
          if (!stillWaiting || permit === null) continue;
          const answer = answers.get(job.tenantId)!;
          // Refused by the tenant's limit, or not asked for behind runs it refused, or its gate
          // unreachable: parked until the gate offers a place (or the backstop re-checks).
          // Refused by a group: the gate wakes this shard when a place frees; a group's full
          // rate window opens at a time the gate said. Not asked yet, behind runs all granted:
          // left as it is, for the next pass, which runs at once.
          const limited = this.tenantLimit(job.tenantId) !== null;
          if (limited && (answer.failed || (asked.has(permit) ? !job.spec.flowControl : (answer.tenantRefused ?? 0) > 0))) {
            park(run, job.tenantId);
          } else if (asked.has(permit) || answer.failed) {
            const windowOpens = job.spec.flowControl ? retryAt.get(job.spec.flowControl.key) : undefined;
            this.store.setDueAt(run.id, Math.min(windowOpens ?? Number.POSITIVE_INFINITY, now + ADMISSION_RECHECK_MS));
          } else more.add(job.tenantId);
          continue;
        }
        this.ledger.admit(run, job, permit, admittedAt);
        admitted.set(job.tenantId, (admitted.get(job.tenantId) ?? 0) + 1);
        if (job.spec.ratePerSecond !== undefined && run.parentRunId === null)
          this.store.admission.setRateNext(job.id, admittedAt + 1000 / job.spec.ratePerSecond);
      }
      for (const { run, dueAt } of plan.deferred) {
        if (this.store.getRun(run.id)?.state === "waiting") this.store.setDueAt(run.id, dueAt);
      }
      for (const tenantId of touched) {
        const limit = this.tenantLimit(tenantId);
        if (limit === null) continue;
        const got = admitted.get(tenantId) ?? 0;
        const hasParked = parked.has(tenantId) || admission.hasParked(tenantId);
        // Every run asked for was granted: the gate may have places still, asked for at once.
        if (!parked.has(tenantId) && got > 0 && (more.has(tenantId) || hasParked)) {
          this.offer(tenantId, limit);
          this.again = true;
          continue;
        }
        const prev = waits.get(tenantId);
        if (!hasParked) {
          if (prev) admission.endWait(tenantId);
          continue;
        }
        // The gate remembers this shard and offers places as they free; should that wake-up be
        // lost (or the gate fail), the backstop asks again, later each time nothing comes of it.
        if (prev && prev.recheckAt > now && got === 0) continue;
        const backoffMs = got > 0 || !prev ? ADMISSION_RECHECK_MS : Math.min(prev.backoffMs * 2, PARKED_RECHECK_MAX_MS);
        admission.setWait(tenantId, now + backoffMs, backoffMs);
      }
    });
  }

  private tenantLimit(tenantId: string): number | null {
    return this.store.getTenant(tenantId)?.maxRunsInFlight ?? null;
  }
}

/** What a tenant's gate answered a pass, or that it could not be reached (`failed`). */
interface GateAnswer {
  asks: PermitAsk[];
  failed: boolean;
  granted: string[];
  retryAt: Record<string, number>;
  tenantRefused?: number;
}

/**
 * Whether a run needs its tenant's gate to start: its tenant has a limit, or its job is in a
 * flow-control group. A workflow's step never does: its workflow run holds the permit that
 * covers it (asking for a second would count the run twice, and under a limit of one never
 * be granted).
 */
function gatedAtGate(run: Pick<RunRow, "parentRunId">, job: Pick<ShardJob, "spec">, tenantLimit: number | null): boolean {
  return run.parentRunId === null && (tenantLimit !== null || job.spec.flowControl !== undefined);
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
