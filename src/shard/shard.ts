import { DurableObject } from "cloudflare:workers";
import { type Env, gateStub } from "../env";
import { failpoint } from "../faults";
import { newCompletionToken, parseCompletionToken, scheduledRunId, triggeredRunId } from "../model/ids";
import { DEFAULT_RETRY } from "../model/job";
import { retryDelay } from "../schedule/backoff";
import { parseDuration } from "../schedule/duration";
import { jitterOffset } from "../schedule/jitter";
import { type DueFire, planDueFires } from "../schedule/misfire";
import { firesBetween, firstFire } from "../schedule/next-fire";
import { planAdmission } from "./admission";
import {
  type Answer,
  type BackfillResult,
  type CatalogEntry,
  type ClaimResult,
  type Completion,
  type Dispatch,
  type DispatchMessage,
  done,
  type JobDefinition,
  type JobRuntime,
  LEASE_GRACE_MS,
  MAX_BACKFILL,
  type Outcome,
  type RunRow,
  type RunView,
  refuse,
  type ShardApi,
  type ShardMetrics,
  type TenantSettings,
  type TokenRefusal,
} from "./contract";
import { decideOverlap } from "./overlap";
import { afterFailure, classifyStatus, DEAD_LETTER_STATES, type FailureKind } from "./run-states";
import { type NewRun, type ShardJob, ShardStore } from "./store";

const DEFAULT_CLAIM_TIMEOUT_MS = 60_000;
/** How long unsent dispatches wait after the Queue refused a send. */
const SEND_RETRY_MS = 2_000;
/** Work per alarm is bounded so one alarm never runs out of CPU; what is left re-arms at once. */
const TICK_BATCH = 2_000;
const QUEUE_BATCH = 100;
/**
 * A run refused by its tenant's gate or by its job's maxConcurrency is woken when capacity
 * frees (the gate calls back; a run of the job ends here); this re-check is only the backstop
 * for a wake-up that was lost.
 */
const ADMISSION_RECHECK_MS = 15_000;
const DEFAULT_TIMEOUT_MS = 30_000;

/**
 * One shard: the single writer of its jobs' runtime state. Each method is a thin shell over
 * one `transactionSync` on the store; all timing goes through the one alarm.
 */
export class Shard extends DurableObject<Env> implements ShardApi {
  private readonly store: ShardStore;
  private flushing: Promise<boolean> | null = null;
  /** One admission at a time: two interleaved at the gate's await would both admit one run. */
  private admitting: Promise<void> | null = null;
  /**
   * Permits to extend at the next flush. Kept in memory only: a renewal lost to a restart lets
   * that permit lapse at its lease, which can only let the tenant briefly exceed its limit.
   */
  private permitRenewals: Array<{ permit: string; tenantId: string; leaseMs: number }> = [];

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    // One transaction: a shard an earlier release created is upgraded all at once or not at all.
    this.store = ctx.storage.transactionSync(() => new ShardStore(ctx.storage.sql));
  }

  // ---- the alarm: fire what is due, move runs whose time has come, send, re-arm ----

  override async alarm(): Promise<void> {
    await this.tick();
  }

  /**
   * Safe to run again at any point: a re-run finds the same due fires (run ids are derived, so
   * no second run), and dispatches committed but not sent wait in the outbox.
   */
  private async tick(): Promise<void> {
    failpoint("shard.alarmStart", this.name);
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      this.fireDueJobs(now);
      this.advanceDueRuns(now);
      this.startBufferedRuns(now);
    });
    failpoint("shard.afterCommit", this.name);
    await this.admit();
    const sent = await this.flushOutbox();
    await this.armAlarm(sent);
  }

  /**
   * Every due fire becomes a run (subject to the job's misfire, overlap and maxRuns rules), and
   * the job moves to its next fire.
   */
  private fireDueJobs(now: number): void {
    for (const job of this.store.dueJobs(now, TICK_BATCH)) {
      const spec = job.spec;
      const plan = planDueFires(
        spec.schedule,
        job.createdAt,
        job.nextFireAt as number,
        now,
        spec.misfire ?? "fire_once",
        parseDuration(spec.catchupWindow ?? "1h")!,
      );
      const ready: DueFire[] = [];
      let next = plan.next;
      for (const fire of plan.fires) {
        // A jittered fire that is nominally past but not yet due waits for its turn.
        if (!fire.catchUp && fire.at + this.jitterOf(job, fire.at) > now) {
          next = fire.at;
          break;
        }
        ready.push(fire);
      }
      const left = (spec.schedule.maxRuns ?? Infinity) - job.fires;
      if (ready.length >= left) {
        ready.length = Math.max(0, left);
        next = null;
      }
      for (const fire of ready) {
        const run = {
          id: scheduledRunId(job.id, fire.at),
          jobId: job.id,
          jobVersion: job.version,
          trigger: "schedule" as const,
          scheduledAt: fire.at,
          catchUp: fire.catchUp,
        };
        this.startRun(job, run, now);
      }
      this.store.setNextFire(job.id, next, next === null ? null : next + this.jitterOf(job, next), ready.length);
    }
  }

  private jitterOf(job: Pick<JobDefinition, "id" | "spec">, instant: number): number {
    return job.spec.jitter === undefined ? 0 : jitterOffset(job.id, instant, parseDuration(job.spec.jitter)!);
  }

  /** Creates a run as the job's overlap policy decides (backfills always start). */
  private startRun(job: ShardJob, run: NewRun, now: number): boolean {
    const policy = run.trigger === "backfill" ? "allow" : (job.spec.overlap ?? "allow");
    const unfinished = policy === "allow" ? [] : this.store.unfinishedRuns(job.id);
    const decision = decideOverlap(policy, unfinished, policy === "buffer_one" && this.store.bufferedRuns(job.id).length > 0);
    if (decision.run === "skipped") return this.store.createRun(run, now, { state: "skipped", reason: decision.reason });
    if (decision.run === "buffered") return this.store.createRun(run, now, { state: "buffered" });
    if (decision.cancel.length > 0) {
      if (this.store.getRun(run.id)) return false; // a repeated fire must not replace its own run
      for (const old of unfinished) this.cancelRun(old, `replaced by run ${run.id}`, now);
    }
    if (this.underFlowControl(job)) return this.store.createRun(run, now, { state: "waiting" });
    return this.store.createRun(run, now, { state: "queued", claimDeadline: now + this.claimTimeoutMs() });
  }

  /** Runs of this job wait for admission: its own limits, or its tenant's runs-in-flight limit. */
  private underFlowControl(job: Pick<ShardJob, "spec" | "tenantId">): boolean {
    return (
      job.spec.maxConcurrency !== undefined ||
      job.spec.ratePerSecond !== undefined ||
      (this.store.getTenant(job.tenantId)?.maxRunsInFlight ?? null) !== null
    );
  }

  /**
   * Sends a run on (`queued` with its dispatch) along `event`, or, for a job under flow
   * control, moves it to `waiting` for admission. `changes` apply either way.
   */
  private sendOn(run: RunRow, event: "start" | "requeue" | "revive", changes: Parameters<ShardStore["moveRun"]>[2], now: number): void {
    const job = this.store.getJob(run.jobId);
    if (job && this.underFlowControl(job)) {
      this.store.moveRun(run, "hold", { ...changes, dueAt: now });
      return;
    }
    const next = this.store.moveRun(run, event, { ...changes, dueAt: now + this.claimTimeoutMs() });
    this.store.addOutbox(next.id, next.fence);
  }

  /**
   * Admits waiting runs as far as flow control allows: the jobs' own limits are decided here
   * (pure, in `planAdmission`), then the tenants' gates grant permits (across shards), then
   * one transaction moves the admitted runs to `queued` with their dispatches. One admission at
   * a time; a run cancelled during the gate call is skipped, and its permit given back.
   */
  private async admit(): Promise<void> {
    while (this.admitting) await this.admitting;
    this.admitting = this.admitDue();
    try {
      await this.admitting;
    } finally {
      this.admitting = null;
    }
  }

  private async admitDue(): Promise<void> {
    const now = Date.now();
    const waiting = this.store.waitingRuns(now, TICK_BATCH);
    if (waiting.length === 0) return;
    const jobs = new Map(this.store.getJobs([...new Set(waiting.map((r) => r.jobId))]).map((j) => [j.id, j]));
    const plan = planAdmission(waiting, jobs, (jobId) => this.store.inFlightCount(jobId), now, ADMISSION_RECHECK_MS);
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
          const permits = await gateStub(this.env, tenantId).acquire(this.name, ask, limit, leaseMs);
          for (const permit of permits) granted.add(permit);
        } catch (err) {
          console.error(`shard ${this.name}: gate of tenant ${tenantId} unreachable; its runs wait`, err);
        }
      }),
    );
    this.ctx.storage.transactionSync(() => {
      for (const candidate of plan.candidates) {
        const job = jobs.get(candidate.jobId)!;
        const permit = gated.has(job.tenantId) ? permitOf(candidate) : null;
        const run = this.store.getRun(candidate.id);
        const stillWaiting = run?.state === "waiting" && run.fence === candidate.fence;
        if (!stillWaiting || (permit !== null && !granted.has(permit))) {
          if (permit !== null && granted.has(permit)) this.store.releasePermitLater(permit, job.tenantId);
          // Refused: the gate wakes this shard when capacity frees. Not asked yet (over the
          // limit): left due, for the next pass, which the alarm runs at once.
          if (stillWaiting && asked.has(permit!)) this.store.setDueAt(run.id, now + ADMISSION_RECHECK_MS);
          continue;
        }
        const next = this.store.moveRun(run, "admit", { dueAt: now + this.claimTimeoutMs(), permit });
        this.store.addOutbox(next.id, next.fence);
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

  /** Ends an unfinished run as cancelled; an attempt in flight is closed, its late outcome stale. */
  private cancelRun(run: RunRow, reason: string, now: number): void {
    if (run.state === "running") this.store.finishAttempt(run.id, run.fence, "cancelled", now, null, reason);
    this.store.moveRun(run, "cancel", { dueAt: null, finishedAt: now, error: reason });
    this.store.removeOutboxOfRun(run.id);
  }

  /** buffer_one: a buffered fire starts once its job has no unfinished run left. */
  private startBufferedRuns(now: number): void {
    for (const run of this.store.bufferedRuns()) {
      if (this.store.unfinishedRuns(run.jobId).length === 0) this.sendOn(run, "start", {}, now);
    }
  }

  /** Runs whose due time passed: lost dispatches go out again, retries start, expired leases fail. */
  private advanceDueRuns(now: number): void {
    for (const run of this.store.dueRuns(now, TICK_BATCH)) {
      const stopped = stoppedReason(this.store.getJob(run.jobId));
      if (stopped && (run.state === "waiting" || run.state === "queued" || run.state === "retry_wait")) {
        // Normally cancelled when the pause or delete arrived; this catches any that slipped by.
        this.store.moveRun(run, "cancel", { dueAt: null, finishedAt: now, error: stopped });
        this.store.removeOutboxOfRun(run.id);
      } else if (run.state === "queued") {
        const next = this.store.moveRun(run, "redispatch", { fence: run.fence + 1, dueAt: now + this.claimTimeoutMs() });
        this.store.addOutbox(next.id, next.fence);
        this.renewPermitLater(run, this.claimTimeoutMs() + this.timeoutOf(run) + LEASE_GRACE_MS);
      } else if (run.state === "retry_wait") {
        this.sendOn(run, "requeue", { attempt: run.attempt + 1, fence: run.fence + 1 }, now);
      } else if (run.state === "running") {
        const error = "timed out: no outcome before the lease expired";
        this.store.finishAttempt(run.id, run.fence, "timed_out", now, null, error);
        this.failRun(run, null, error, now);
      }
    }
  }

  /**
   * Retry later, or end the run as dead (retries exhausted) or failed (the target refused).
   * A job paused or deleted while this attempt ran gets no further attempt: its run is cancelled.
   */
  private failRun(run: RunRow, status: number | null, error: string | null, now: number, retryAfterMs = 0, kind?: FailureKind): void {
    // Job rows outlive deletion (tombstones), so the policy is always there.
    const job = this.store.getJob(run.jobId);
    const retry = job?.spec.retry ?? DEFAULT_RETRY;
    const decision = afterFailure(kind ?? classifyStatus(status, retry.retryOn), run.attempt, retry.maxAttempts);
    const stopped = stoppedReason(job);
    if (decision === "retry" && stopped) {
      this.store.moveRun(run, "cancel", { dueAt: null, finishedAt: now, status, error: `${error ?? "failed"}; not retried: ${stopped}` });
    } else if (decision === "retry") {
      const delay = Math.max(retryDelay(run.attempt + 1, retry.backoff, retry.jitter), retryAfterMs);
      this.store.moveRun(run, "retry", { dueAt: now + delay, status, error });
    } else {
      this.store.moveRun(run, decision, { dueAt: null, finishedAt: now, status, error });
    }
  }

  // ---- the outbox ----

  /**
   * Sends every unsent dispatch, deleting each only after its send succeeded (invariant 3).
   * One flush at a time: the alarm and a trigger may both ask, and requests interleave at
   * every await. Returns false when the Queue refused a send; the rows stay for the next alarm.
   */
  private async flushOutbox(): Promise<boolean> {
    while (this.flushing) await this.flushing;
    this.flushing = (async () => {
      const sent = await this.sendOutbox();
      await this.sendPermitRenewals();
      return (await this.sendPermitReleases()) && sent;
    })();
    try {
      return await this.flushing;
    } finally {
      this.flushing = null;
    }
  }

  private async sendOutbox(): Promise<boolean> {
    const shard = this.name;
    for (;;) {
      const pending = this.store.outbox(TICK_BATCH);
      if (pending.length === 0) return true;
      const chunks: Dispatch[][] = [];
      for (let i = 0; i < pending.length; i += QUEUE_BATCH) chunks.push(pending.slice(i, i + QUEUE_BATCH));
      const sent = await Promise.allSettled(
        chunks.map(async (chunk) => {
          failpoint("shard.queueSend", shard);
          await this.env.RUNS.sendBatch(
            chunk.map((d): { body: DispatchMessage; contentType: "json" } => ({
              body: { shard, runId: d.runId, fence: d.fence },
              contentType: "json",
            })),
          );
        }),
      );
      const ok = chunks.filter((_, i) => sent[i]?.status === "fulfilled");
      this.store.removeOutbox(ok.flat());
      if (ok.length < chunks.length) {
        const reason = sent.find((s) => s.status === "rejected") as PromiseRejectedResult;
        console.error(`shard ${shard}: queue send failed, ${pending.length} dispatches kept`, reason.reason);
        return false;
      }
    }
  }

  private renewPermitLater(run: RunRow, leaseMs: number): void {
    const tenantId = run.permit === null ? undefined : this.store.getJob(run.jobId)?.tenantId;
    if (tenantId) this.permitRenewals.push({ permit: run.permit!, tenantId, leaseMs });
  }

  /** Extends the permits of attempts that outlive their first lease; best effort (see permitRenewals). */
  private async sendPermitRenewals(): Promise<void> {
    const renewals = this.permitRenewals.splice(0);
    await Promise.allSettled(
      [...Map.groupBy(renewals, (r) => r.tenantId)].map(([tenantId, list]) =>
        gateStub(this.env, tenantId).renew(
          list.map((r) => r.permit),
          Math.max(...list.map((r) => r.leaseMs)),
        ),
      ),
    );
  }

  /** Gives permits back to their tenants' gates, deleting each row only once its gate took it. */
  private async sendPermitReleases(): Promise<boolean> {
    const pending = this.store.permitReleases(TICK_BATCH);
    if (pending.length === 0) return true;
    const results = await Promise.allSettled(
      [...Map.groupBy(pending, (p) => p.tenantId)].map(async ([tenantId, list]) => {
        const permits = list.map((p) => p.permit);
        await gateStub(this.env, tenantId).release(permits);
        return permits;
      }),
    );
    this.store.removePermitReleases(results.flatMap((r) => (r.status === "fulfilled" ? r.value : [])));
    return results.every((r) => r.status === "fulfilled");
  }

  /** Runs ended: a buffered fire may start, a waiting run may be admitted, permits go back; then the alarm is re-pointed. */
  private async afterRunsEnded(now: number): Promise<void> {
    this.ctx.storage.transactionSync(() => this.startBufferedRuns(now));
    await this.admit();
    const sent = await this.flushOutbox();
    await this.armAlarm(sent);
  }

  /**
   * Points the one alarm at the earliest thing the shard must do. Called after every change,
   * and last in the alarm handler: re-arming before a throw would lose the runtime's retry.
   */
  private async armAlarm(lastSendOk = true): Promise<void> {
    const now = Date.now();
    const at = this.store.earliestWork(lastSendOk ? now : now + SEND_RETRY_MS);
    const current = await this.ctx.storage.getAlarm();
    if (at === null) {
      if (current !== null) await this.ctx.storage.deleteAlarm();
    } else if (current !== at) {
      await this.ctx.storage.setAlarm(at);
    }
  }

  // ---- RPC: jobs ----

  /** Applies definitions newer than what the shard holds; older or equal versions change nothing. */
  async applyJobs(definitions: JobDefinition[], tenants: TenantSettings[] = []): Promise<JobRuntime[]> {
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      for (const tenant of tenants) this.store.putTenant(tenant);
      for (const def of definitions) {
        const held = this.store.getJob(def.id);
        if (held && held.version >= def.version) continue;
        const next = nextFireOnChange(held, def, now);
        this.store.putJob(def, next, next === null ? null : next + this.jitterOf(def, next));
        const stopped = stoppedReason(def);
        if (stopped) this.cancelPending(def.id, stopped, now);
      }
    });
    await this.armAlarm();
    return this.jobRuntimes(definitions.map((d) => d.id));
  }

  /**
   * Newer settings of tenants (a rotated signing secret, a changed runs-in-flight limit). A
   * raised limit may let waiting runs start, so admission runs at once.
   */
  async applyTenants(tenants: TenantSettings[]): Promise<void> {
    this.ctx.storage.transactionSync(() => {
      for (const tenant of tenants) this.store.putTenant(tenant);
    });
    await this.admitWaiting();
  }

  /** Called by a tenant gate when capacity freed (and harmless at any other time). */
  async admitWaiting(): Promise<void> {
    this.store.dueAllWaiting(Date.now());
    await this.admit();
    const sent = await this.flushOutbox();
    await this.armAlarm(sent);
  }

  async jobRuntimes(ids: string[]): Promise<JobRuntime[]> {
    return this.store.getJobs(ids).map((j) => ({
      id: j.id,
      version: j.version,
      nextRunAt: j.paused ? null : j.nextFireAt,
      completed: !j.deleted && j.nextFireAt === null,
    }));
  }

  private cancelPending(jobId: string, reason: string, now: number): void {
    for (const run of this.store.pendingRuns(jobId)) {
      this.store.moveRun(run, "cancel", { dueAt: null, finishedAt: now, error: reason });
      this.store.removeOutboxOfRun(run.id);
    }
  }

  /** One extra run now. The same trigger key always names the same run. Null if the job is unknown. */
  async trigger(jobId: string, triggerKey: string): Promise<Answer<RunView, "unknown_job" | "job_paused">> {
    const job = this.store.getJob(jobId);
    if (!job || job.deleted) return refuse("unknown_job");
    if (job.paused) return refuse("job_paused"); // nothing runs for a paused job, not even by hand
    const now = Date.now();
    const runId = triggeredRunId(jobId, triggerKey);
    this.ctx.storage.transactionSync(() => {
      this.startRun(job, { id: runId, jobId, jobVersion: job.version, trigger: "manual", scheduledAt: now, catchUp: false }, now);
    });
    await this.admit();
    const sent = await this.flushOutbox();
    await this.armAlarm(sent);
    return done((await this.getRun(runId))!);
  }

  /**
   * Runs for every fire of the job in [from, to]. Idempotent: a fire that already has a run
   * keeps it (run ids are derived from job and instant). Backfills ignore the overlap policy:
   * the user asked for each of them.
   */
  async backfill(jobId: string, from: number, to: number): Promise<Answer<BackfillResult, "unknown_job" | "job_paused" | "too_many">> {
    const job = this.store.getJob(jobId);
    if (!job || job.deleted) return refuse("unknown_job");
    if (job.paused) return refuse("job_paused");
    const fires = firesBetween(job.spec.schedule, job.createdAt, from, to, MAX_BACKFILL + 1);
    if (fires.length > MAX_BACKFILL) return refuse("too_many");
    const now = Date.now();
    const created: string[] = [];
    const existing: string[] = [];
    this.ctx.storage.transactionSync(() => {
      for (const at of fires) {
        const id = scheduledRunId(job.id, at);
        const run = { id, jobId, jobVersion: job.version, trigger: "backfill" as const, scheduledAt: at, catchUp: false };
        (this.startRun(job, run, now) ? created : existing).push(id);
      }
    });
    await this.admit();
    const sent = await this.flushOutbox();
    await this.armAlarm(sent);
    return done({ created, existing });
  }

  // ---- RPC: the consumer's side ----

  /** Claims dispatched runs for execution. Only the current fence of a queued run wins (invariant 4). */
  async claim(dispatches: Dispatch[]): Promise<ClaimResult[]> {
    const now = Date.now();
    const results = this.ctx.storage.transactionSync(() =>
      dispatches.map((d): ClaimResult => {
        const run = this.store.getRun(d.runId);
        const job = run && this.store.getJob(run.jobId);
        if (!run || !job || stoppedReason(job) || run.fence !== d.fence || run.state !== "queued") {
          return { result: "stale", runId: d.runId, fence: d.fence };
        }
        const leaseUntil = now + job.spec.timeoutMs + LEASE_GRACE_MS;
        const completionToken = newCompletionToken(this.name, run.fence);
        // The run executes the job as it is now; it records that version (a PATCH may have come).
        this.store.moveRun(run, "claim", { dueAt: leaseUntil, startedAt: run.startedAt ?? now, jobVersion: job.version });
        this.store.startAttempt(run.id, run.attempt, run.fence, now, completionToken);
        return {
          result: "claimed",
          runId: run.id,
          fence: run.fence,
          jobId: run.jobId,
          tenantId: job.tenantId,
          signingGeneration: this.store.getTenant(job.tenantId)?.signingGeneration ?? 1,
          attempt: run.attempt,
          scheduledAt: run.scheduledAt,
          target: job.spec.target,
          timeoutMs: job.spec.timeoutMs,
          completionToken,
        };
      }),
    );
    await this.armAlarm();
    return results;
  }

  /**
   * Records the consumer's outcomes. Each run's outcome is recorded once; an outcome for any
   * fence but the current running one changes nothing (a zombie's is kept on its attempt).
   */
  async report(outcomes: Outcome[]): Promise<Array<"recorded" | "stale">> {
    const now = Date.now();
    const results = this.ctx.storage.transactionSync(() =>
      outcomes.map((o) => {
        const run = this.store.getRun(o.runId);
        const attempt = this.store.getAttempt(o.runId, o.fence);
        if (!run || !attempt || run.fence !== o.fence || run.state !== "running" || attempt.outcome !== "running") {
          if (attempt?.outcome === "timed_out" || attempt?.outcome === "cancelled")
            this.store.noteLateOutcome(o.runId, o.fence, describeOutcome(o));
          return "stale" as const;
        }
        if (o.accepted) {
          // The target took the work on: the lease restarts from its answer, and heartbeats extend it.
          this.store.acceptAttempt(run.id, run.fence, o.status ?? 202);
          this.store.extendLease(run.id, now + this.timeoutOf(run) + LEASE_GRACE_MS);
          this.renewPermitLater(run, this.timeoutOf(run) + LEASE_GRACE_MS);
        } else {
          this.recordOutcome(run, o, now);
        }
        return "recorded" as const;
      }),
    );
    await this.afterRunsEnded(now);
    return results;
  }

  private recordOutcome(
    run: RunRow,
    o: { ok: boolean; status: number | null; error: string | null; retryAfterMs?: number; result?: string | null; kind?: FailureKind },
    now: number,
  ): void {
    this.store.finishAttempt(run.id, run.fence, o.ok ? "succeeded" : "failed", now, o.status, o.error);
    if (o.ok) {
      this.store.moveRun(run, "succeed", { dueAt: null, finishedAt: now, status: o.status, error: null, result: o.result ?? null });
    } else {
      this.failRun(run, o.status, o.error, now, o.retryAfterMs, o.kind);
    }
  }

  // ---- RPC: long-running targets ----

  /**
   * Checks a completion token against the run's current attempt. A token of an earlier attempt
   * is stale (and its outcome is noted on that attempt); anything else unknown is invalid.
   */
  private checkToken(runId: string, token: string, lateOutcome: string): Answer<RunRow, TokenRefusal> {
    const run = this.store.getRun(runId);
    if (!run) return refuse("unknown_run");
    const fence = parseCompletionToken(token)?.fence;
    const attempt = fence === undefined ? null : this.store.getAttempt(runId, fence);
    if (!attempt || !sameToken(attempt.completionToken, token)) return refuse("invalid_token");
    const live = run.fence === fence && run.state === "running" && (attempt.outcome === "running" || attempt.outcome === "accepted");
    if (!live) {
      if (attempt.outcome === "timed_out" || attempt.outcome === "cancelled") this.store.noteLateOutcome(runId, attempt.fence, lateOutcome);
      return refuse("stale");
    }
    return done(run);
  }

  /** The end of a long-running attempt, reported by the target itself. */
  async complete(runId: string, token: string, completion: Completion): Promise<Answer<RunView, TokenRefusal>> {
    const now = Date.now();
    const late = completion.ok ? "completed: succeeded" : `completed: failed${completion.error ? `: ${completion.error}` : ""}`;
    const checked = this.ctx.storage.transactionSync(() => {
      const checked = this.checkToken(runId, token, late);
      if (!checked.ok) return checked;
      this.recordOutcome(
        checked.value,
        {
          ok: completion.ok,
          status: null,
          error: completion.ok ? null : (completion.error ?? "the target reported a failure"),
          result: completion.result ?? null,
          kind: completion.retry === false ? "permanent" : "retryable",
        },
        now,
      );
      return checked;
    });
    if (!checked.ok) return checked;
    await this.afterRunsEnded(now);
    return done((await this.getRun(runId))!);
  }

  /** Extends a long-running attempt's lease to `extendMs` from now. */
  async heartbeat(runId: string, token: string, extendMs: number): Promise<Answer<{ leaseUntil: number }, TokenRefusal>> {
    const now = Date.now();
    const checked = this.ctx.storage.transactionSync(() => {
      const checked = this.checkToken(runId, token, "heartbeat");
      if (checked.ok) {
        this.store.extendLease(runId, now + extendMs);
        this.renewPermitLater(checked.value, extendMs + LEASE_GRACE_MS);
      }
      return checked;
    });
    if (!checked.ok) return checked;
    const sent = await this.flushOutbox();
    await this.armAlarm(sent);
    return done({ leaseUntil: now + extendMs });
  }

  // ---- RPC: dead letters ----

  async deadLetters(
    scope: { tenantId: string | null; jobId: string | null },
    limit: number,
    before?: { finishedAt: number; id: string },
  ): Promise<RunView[]> {
    return this.withAttemptCounts(this.store.deadLetters(scope, limit, before));
  }

  /** Gives a dead or failed run a fresh set of attempts. */
  async retryRun(runId: string): Promise<Answer<RunView, "unknown_run" | "not_retryable">> {
    const run = this.store.getRun(runId);
    if (!run) return refuse("unknown_run");
    const job = this.store.getJob(run.jobId);
    if (stoppedReason(job) || !DEAD_LETTER_STATES.includes(run.state)) return refuse("not_retryable");
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      this.sendOn(run, "revive", { attempt: 1, fence: run.fence + 1, finishedAt: null, status: null, error: null }, now);
    });
    await this.admit();
    const sent = await this.flushOutbox();
    await this.armAlarm(sent);
    return done((await this.getRun(runId))!);
  }

  /** Dispatches the Queue gave up on (its dead-letter queue): their runs fail instead of vanishing. */
  async abandonDispatches(dispatches: Dispatch[]): Promise<Array<"failed" | "stale">> {
    const now = Date.now();
    const results = this.ctx.storage.transactionSync(() =>
      dispatches.map((d) => {
        const run = this.store.getRun(d.runId);
        if (!run || run.fence !== d.fence || run.state !== "queued") return "stale" as const;
        this.store.moveRun(run, "abandon", {
          dueAt: null,
          finishedAt: now,
          error: "the queue dead-lettered this dispatch after repeated delivery failures",
        });
        this.store.removeOutboxOfRun(run.id);
        return "failed" as const;
      }),
    );
    await this.afterRunsEnded(now);
    return results;
  }

  // ---- RPC: reading runs ----

  async getRun(runId: string): Promise<RunView | null> {
    const run = this.store.getRun(runId);
    if (!run) return null;
    const attemptLog = this.store.attempts(runId);
    return { ...run, attempts: attemptLog.length, attemptLog };
  }

  async listRuns(jobId: string, limit: number, before?: { scheduledAt: number; id: string }): Promise<RunView[]> {
    return this.withAttemptCounts(this.store.listRuns(jobId, limit, before));
  }

  private withAttemptCounts(runs: RunRow[]): RunView[] {
    const counts = this.store.attemptCounts(runs.map((r) => r.id));
    return runs.map((r) => ({ ...r, attempts: counts.get(r.id) ?? 0 }));
  }

  // ---- RPC: metrics ----

  /** Of one tenant's runs, or of all (null). */
  async metrics(windowMs: number, tenantId: string | null = null): Promise<ShardMetrics> {
    const now = Date.now();
    return this.store.metrics(now - windowMs, now, 1_000, tenantId);
  }

  // ---- RPC: the sweep ----

  /** Of the catalog's entries, the ids this shard lacks or holds at an older version. */
  async staleJobs(entries: CatalogEntry[]): Promise<string[]> {
    const held = this.store.jobVersions(entries.map((e) => e.id));
    return entries
      .filter((e) => {
        const version = held.get(e.id);
        return version === undefined ? !e.deleted : version < e.version;
      })
      .map((e) => e.id);
  }

  /**
   * Alarms can be lost or late (a workerd bug can leave a SQLite object's alarm late), so the
   * sweep calls this: work already due runs now, otherwise the alarm is set again.
   */
  async assertAlarm(): Promise<{ ranDueWork: boolean; alarmAt: number | null }> {
    const now = Date.now();
    const due = this.store.earliestWork(now);
    const ranDueWork = due !== null && due <= now;
    if (ranDueWork) await this.tick();
    else await this.armAlarm();
    return { ranDueWork, alarmAt: await this.ctx.storage.getAlarm() };
  }

  // ---- identity and settings ----

  /**
   * The shard's own name (every shard is reached through `idFromName`), for the dispatches it
   * sends and the completion tokens it issues; faults armed for one shard name it too.
   */
  private get name(): string {
    const name = this.ctx.id.name;
    if (name === undefined) throw new Error("a shard must be reached by name (idFromName)");
    return name;
  }

  private timeoutOf(run: RunRow): number {
    return this.store.getJob(run.jobId)?.spec.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  private claimTimeoutMs(): number {
    return Number(this.env.CLAIM_TIMEOUT_MS ?? DEFAULT_CLAIM_TIMEOUT_MS);
  }
}

/**
 * Next fire of a job whose definition changes. New jobs start from their creation (a job the
 * sweep delivers late still gets what it missed, by its misfire policy); a changed schedule
 * starts afresh from now; anything else, a resume included, keeps its place: fires missed
 * while paused are then due, and the misfire policy decides what becomes of them.
 */
export function nextFireOnChange(held: ShardJob | null, def: JobDefinition, now: number): number | null {
  if (def.deleted) return null;
  if (!held) return firstFire(def.spec.schedule, def.createdAt);
  if (JSON.stringify(held.spec.schedule) !== JSON.stringify(def.spec.schedule)) return firstFire(def.spec.schedule, now);
  return held.nextFireAt;
}

/** Why nothing more may run for this job, or null when it is live. */
function stoppedReason(job: Pick<JobDefinition, "paused" | "deleted"> | null): string | null {
  if (!job || job.deleted) return "job deleted";
  return job.paused ? "job paused" : null;
}

function describeOutcome(o: Outcome): string {
  if (o.accepted) return `HTTP ${o.status ?? 202}: accepted`;
  return o.ok ? `HTTP ${o.status}` : (o.error ?? `HTTP ${o.status}`);
}

/** Constant-time comparison of a presented token with the stored one (same length by format). */
function sameToken(stored: string, presented: string): boolean {
  const a = new TextEncoder().encode(stored);
  const b = new TextEncoder().encode(presented);
  return a.byteLength === b.byteLength && crypto.subtle.timingSafeEqual(a, b);
}
