import { failpoint } from "../faults";
import { jobIdOfRun } from "../model/ids";
import type { Dispatch, KeyedDispatch } from "../protocol/queue-messages";
import type { RunRow } from "../protocol/stored-rows";
import { packDispatches } from "./dispatch-packs";
import type { ShardHost } from "./host";
import { TICK_BATCH } from "./ledger";
import type { PermitCheck } from "./ledger-ports";
import type { ShardStore } from "./store";

/**
 * How long what is unsent waits after a send was refused (the Queue, or a tenant's gate for a
 * renewal or release), doubled for each refusal in a row up to SEND_RETRY_MAX_MS: a Queue or
 * gate that stays down is asked about once a minute, not every 2 s for as long as it is down.
 */
const SEND_RETRY_MS = 2_000;
const SEND_RETRY_MAX_MS = 60_000;

/**
 * Dispatch: what the shard's transactions left to send goes out after commit. Dispatches are
 * kept in memory, not written down: a row per dispatch would cost two rows written per run
 * (docs/cost.md). One that a crash between commit and send loses goes out again when its run's
 * lease ends (leases.ts; docs/architecture.md, invariant 3). A shard does not send its leased
 * runs again when it starts: an idle shard is evicted between sending and the reports, so most
 * of them were sent and would all go twice. Permits go back to, or are extended at, their
 * tenants' gates.
 */
export class Dispatcher {
  /** Dispatches committed (or about to be, see `mark`) and not yet taken by the Queue. */
  private unsent: KeyedDispatch[] = [];
  /** The flush under way: one at a time, since the alarm and a call may both ask. */
  private flushing: Promise<void> | null = null;
  /** A change committed while a flush was under way: its permit releases may have been read past. */
  private again = false;
  /** The Queue refused the last send: what is unsent waits SEND_RETRY_MS before the alarm tries again. */
  private lastSendFailed = false;
  /** Flushes refused in a row, and when the alarm tries again after the last (see SEND_RETRY_MS). */
  private refusals = 0;
  private retryAt = 0;
  /**
   * Permits to extend at the next flush, one entry per permit until when it must hold: a
   * heartbeat, a 202 and a lease row coming due each renew it, and while its gate does not
   * answer they fold into one renewal, the latest end, rather than piling up. In memory: one
   * lost to a restart lets that permit lapse at its lease, until the attempt's lease row renews
   * it (the ledger's `leaseCame`) and the gate takes it again.
   */
  private permitRenewals = new Map<string, { tenantId: string; until: number }>();
  /** Dispatches withdrawn while unsent (`withdraw`), by `dispatchKey`: skipped by the next send. */
  private withdrawn = new Set<string>();
  /**
   * Resends of runs that hold their own permit, waiting for their gate to confirm it before they
   * go (`sendOnPermit`). In memory like every dispatch: one lost with the object goes out again
   * when its lease ends, and is confirmed then.
   */
  private onPermit: Array<{ dispatch: KeyedDispatch; check: PermitCheck }> = [];
  /** What becomes of resends whose permit's place was given away (their attempts end as lost ones: capabilities.ts). */
  onPlaceGivenAway: (dispatches: KeyedDispatch[]) => void = () => {};

  constructor(
    /** The queue is asked at each send, so a misconfigured one is a refused send. */
    private readonly host: Pick<ShardHost, "queueOf" | "gateOf" | "name" | "meter">,
    private readonly store: ShardStore,
  ) {}

  /**
   * Sends everything unsent. A call made while a flush is under way does not wait for it: that
   * flush sends until nothing is unsent, and runs once more for what was committed after its
   * last read; whoever started it re-arms the alarm when it ends.
   */
  async flush(): Promise<void> {
    if (this.flushing) {
      this.again = true;
      return;
    }
    if (this.permitRenewals.size === 0 && this.unsent.length === 0 && this.onPermit.length === 0 && !this.store.permitReleases.any())
      return;
    this.flushing = (async () => {
      try {
        do {
          this.again = false;
          // Awaited only when there is something to confirm: an await more before the send would let
          // the alarm write its next chunk before this one's dispatches go out.
          const confirmed = this.onPermit.length === 0 || (await this.confirmPermits());
          const sent = await this.sendDispatches();
          const renewed = await this.sendPermitRenewals();
          const released = await this.sendPermitReleases();
          this.lastSendFailed = !(confirmed && sent && renewed && released);
          this.refusals = this.lastSendFailed ? this.refusals + 1 : 0;
          if (this.lastSendFailed) this.retryAt = Date.now() + Math.min(SEND_RETRY_MS * 2 ** (this.refusals - 1), SEND_RETRY_MAX_MS);
        } while (this.again && !this.lastSendFailed);
      } finally {
        this.flushing = null;
      }
    })();
    return this.flushing;
  }

  /** A run's dispatch, to send once the change that made it commits (counted with it: the meter holds a change's counts). */
  send(dispatch: KeyedDispatch): void {
    this.host.meter.counters.dispatched();
    this.unsent.push(dispatch);
  }

  /**
   * A resend of a run whose own permit covers it (its lease ended with no outcome): it goes out
   * only once its gate has renewed the permit, or granted it again because its place is still
   * free. One whose place the gate gave away meanwhile (its lease ran out during an outage, and
   * another run took it) is not sent: `onPlaceGivenAway` ends its attempt as a lost one, and a retry
   * waits for a permit again, so the tenant's and the group's limits hold across a crash (docs/architecture.md,
   * invariant 10). One gate call per tenant per flush, as for renewals.
   */
  sendOnPermit(dispatch: KeyedDispatch, check: PermitCheck): void {
    this.host.meter.counters.dispatched();
    this.onPermit.push({ dispatch, check });
  }

  /** The job's dispatches the Queue has not taken (a run's id names its job), those waiting for their permit included. */
  unsentOf(jobId: string): Dispatch[] {
    return [...this.unsent, ...this.onPermit.map((p) => p.dispatch)].filter((d) => jobIdOfRun(d.runId) === jobId);
  }

  /**
   * Drops a dispatch the Queue has not taken (its run was cancelled before it went out). Marked,
   * not spliced out, so that `mark`/`rollBack` still count the list; a send skips it.
   */
  withdraw(dispatch: Dispatch): void {
    this.withdrawn.add(dispatchKey(dispatch));
  }

  /** Where the unsent lists end before a change; `rollBack(mark)` forgets what a failed change added. */
  mark(): { unsent: number; onPermit: number } {
    return { unsent: this.unsent.length, onPermit: this.onPermit.length };
  }

  rollBack(mark: { unsent: number; onPermit: number }): void {
    this.unsent.length = Math.min(mark.unsent, this.unsent.length);
    this.onPermit.length = Math.min(mark.onPermit, this.onPermit.length);
  }

  /**
   * Dispatches not yet taken by the Queue (a metric: the dispatch backlog); of one tenant's runs
   * only, when given (a run's id names its job): the outbox holds every tenant's dispatches.
   */
  unsentCount(tenantId: string | null = null): number {
    const unsent = [...this.unsent, ...this.onPermit.map((p) => p.dispatch)];
    if (tenantId === null) return unsent.length;
    return unsent.filter((d) => {
      const jobId = jobIdOfRun(d.runId);
      return jobId !== null && this.store.getJob(jobId)?.tenantId === tenantId;
    }).length;
  }

  /** Extends the run's tenant permit at the next flush, when it holds one: one renewal per permit, to the latest end asked. */
  renewPermitLater(run: Pick<RunRow, "permit" | "jobId">, leaseMs: number): void {
    const tenantId = run.permit === null ? undefined : this.store.getJob(run.jobId)?.tenantId;
    if (!tenantId) return;
    const until = Date.now() + leaseMs;
    const pending = this.permitRenewals.get(run.permit!);
    if (!pending || pending.until < until) this.permitRenewals.set(run.permit!, { tenantId, until });
  }

  /** Renewals not yet taken by their gates (one per permit). */
  pendingRenewals(): number {
    return this.permitRenewals.size;
  }

  /** When dispatch next has work: now for rows unsent, later after refused sends (backing off); nothing while a flush is under way. */
  nextDue(now: number): number | null {
    if (
      this.flushing ||
      (this.unsent.length === 0 && this.onPermit.length === 0 && this.permitRenewals.size === 0 && !this.store.permitReleases.any())
    )
      return null;
    return this.lastSendFailed ? Math.max(now, this.retryAt) : now;
  }

  /**
   * Asks each tenant's gate for the permits of the resends waiting on them (`sendOnPermit`), as
   * an admission asks: a permit still held is renewed, one that lapsed is granted again only
   * where the tenant's limit and its group's have room. Granted: the resend joins what is sent
   * now, while its attempt is still the run's. Refused: handed to `onPlaceGivenAway`. A gate
   * that fails keeps its resends for the next flush (false).
   */
  private async confirmPermits(): Promise<boolean> {
    if (this.onPermit.length === 0) return true;
    const now = Date.now();
    const taken = this.onPermit.splice(0);
    const byTenant = [...Map.groupBy(taken, (p) => p.check.tenantId)];
    const results = await Promise.allSettled(
      byTenant.map(([tenantId, list]) =>
        this.host.gateOf(tenantId).admit(
          this.host.name(),
          list.map((p) => p.check.ask),
          this.store.getTenant(tenantId)?.maxRunsInFlight ?? null,
          Math.max(1, Math.max(...list.map((p) => p.check.until)) - now),
        ),
      ),
    );
    const granted: KeyedDispatch[] = [];
    const refused: KeyedDispatch[] = [];
    byTenant.forEach(([, list], i) => {
      const result = results[i]!;
      if (result.status === "rejected") {
        this.onPermit.unshift(...list);
        return;
      }
      const yes = new Set(result.value.granted);
      for (const p of list) (yes.has(p.check.ask.permit) ? granted : refused).push(p.dispatch);
    });
    if (granted.length > 0) this.unsent.push(...this.stillLeased(granted));
    if (refused.length > 0) this.onPlaceGivenAway(refused);
    const failed = results.filter((r) => r.status === "rejected");
    if (failed.length > 0) console.error(`shard ${this.host.name()}: permits of resends not confirmed, kept for the next flush`, failed);
    return failed.length === 0;
  }

  /** Returns false when the Queue refused a send; the dispatches stay for the next alarm. */
  private async sendDispatches(): Promise<boolean> {
    const shard = this.host.name();
    if (this.lastSendFailed) this.unsent = this.stillLeased(this.unsent);
    for (;;) {
      // Taken off the list while they are sent; a refused batch's dispatches go back.
      const taken = this.unsent.splice(0, TICK_BATCH);
      if (taken.length === 0) {
        this.withdrawn.clear();
        return true;
      }
      const pending = this.withdrawn.size === 0 ? taken : taken.filter((d) => !this.withdrawn.has(dispatchKey(d)));
      if (pending.length === 0) continue;
      const batches = packDispatches(shard, pending);
      const sent = await Promise.allSettled(
        batches.map(async (batch) => {
          failpoint("shard.queueSend", shard);
          await this.host.queueOf(shard).sendBatch(batch.map((body) => ({ body, contentType: "json" })));
          failpoint("shard.queueSendAnswer", shard);
        }),
      );
      const refused = batches.filter((_, i) => sent[i]?.status !== "fulfilled");
      this.host.meter.count(
        "queueMessages",
        batches.reduce((n, batch, i) => (sent[i]?.status === "fulfilled" ? n + batch.length : n), 0),
      );
      if (refused.length > 0) {
        const kept = refused.flat().flatMap((pack) => pack.dispatches);
        this.unsent.unshift(...kept);
        const reason = sent.find((s) => s.status === "rejected") as PromiseRejectedResult;
        console.error(`shard ${shard}: queue send failed, ${kept.length} dispatches kept`, reason.reason);
        return false;
      }
    }
  }

  /**
   * What a refused send kept, less what no longer needs to go: each dispatch once (a lease that
   * ended meanwhile sent it again), and only while its attempt is still the run's under that fence
   * (one that timed out meanwhile, or ended, must not call its target now). Read only after a
   * refusal: the sends that go at once, the usual case, read nothing.
   */
  private stillLeased(kept: KeyedDispatch[]): KeyedDispatch[] {
    const latest = new Map(kept.map((d) => [dispatchKey(d), d]));
    const runs = new Map(this.store.getRuns([...new Set(kept.map((d) => d.runId))]).map((r) => [r.id, r]));
    return [...latest.values()].filter((d) => {
      const run = runs.get(d.runId);
      return run !== undefined && run.state === "running" && run.fence === d.fence;
    });
  }

  /** Extends the permits of attempts that outlive their first lease; false when a gate refused, its renewals kept for the next flush. */
  private async sendPermitRenewals(): Promise<boolean> {
    const now = Date.now();
    // A renewal whose end passed while it waited holds nothing any more: the attempt's lease is
    // over too, and the ledger's lease row decides what comes of it.
    const renewals = [...this.permitRenewals].filter(([, r]) => r.until > now);
    this.permitRenewals.clear();
    const groups = [...Map.groupBy(renewals, ([, r]) => r.tenantId)];
    const results = await Promise.allSettled(
      groups.map(async ([tenantId, list]) => {
        failpoint("shard.permitRenew", this.host.name());
        return this.host.gateOf(tenantId).renew(
          list.map(([permit]) => permit),
          Math.max(...list.map(([, r]) => r.until)) - now,
          this.host.name(),
        );
      }),
    );
    const failed = groups.filter((_, i) => results[i]!.status === "rejected").flatMap(([, list]) => list);
    if (failed.length === 0) return true;
    console.error(`shard ${this.host.name()}: ${failed.length} permit renewals failed, kept for the next flush`);
    // Kept unless a newer renewal of the same permit came meanwhile (it ends later).
    for (const [permit, r] of failed) if (!this.permitRenewals.has(permit)) this.permitRenewals.set(permit, r);
    return false;
  }

  /** Gives permits back to their tenants' gates; those a gate did not take wait for the next flush. */
  private async sendPermitReleases(): Promise<boolean> {
    const taken = this.store.permitReleases.take(TICK_BATCH);
    if (taken.length === 0) return true;
    const byTenant = [...Map.groupBy(taken, (p) => p.tenantId)];
    const results = await Promise.allSettled(
      byTenant.map(([tenantId, list]) => this.host.gateOf(tenantId).release(list.map((p) => p.permit))),
    );
    this.store.permitReleases.putBack(byTenant.flatMap(([, list], i) => (results[i]!.status === "fulfilled" ? [] : list)));
    return results.every((r) => r.status === "fulfilled");
  }
}

const dispatchKey = (d: Dispatch) => `${d.runId}#${d.fence}`;
