import { chainedRunId, scheduledRunId, triggeredRunId } from "../model/ids";
import { type Answer, type BackfillResult, done, MAX_BACKFILL, refuse, type TriggeredBy } from "../protocol/shard-rpc";
import type { JobDefinition, TenantSettings } from "../protocol/stored-rows";
import { parseDuration } from "../schedule/duration";
import { jitterOffset } from "../schedule/jitter";
import { type DueFire, planDueFires } from "../schedule/misfire";
import { firesBetween, firstFire } from "../schedule/next-fire";
import { watchesOpenRuns } from "./admission";
import type { ShardHost } from "./host";
import type { RunLedger } from "./ledger";
import { decideOverlap } from "./overlap";
import type { NewRun, ShardJob } from "./rows";
import { stoppedReason } from "./run-stops";
import type { ShardStore } from "./store";
import type { Workflows } from "./workflows";

/**
 * Due jobs fired per transaction by the alarm (TICK_BATCH in all per alarm). Each chunk's
 * dispatches start on their way before the next chunk is written, so a burst's first dispatch
 * waits for one chunk, not for the whole tick. Measured on the local stack (`npm run bench`,
 * one shard): a one-off fire takes 0.1 to 0.3 ms to write, by the machine's load, so a chunk
 * of 200 takes 20 to 60 ms and the first dispatch leaves about 40 ms after the instant (after
 * about 460 ms with one transaction of 2,000). Each chunk adds a turn of the event loop (about
 * 1.2 ms) and a transaction with its due-jobs query (0.04 ms): about 4% of a tick of 2,000 at
 * 200 a chunk, 15% at 50. And 200 fills two `sendBatch` calls of 100.
 */
export const FIRE_CHUNK = 200;

/**
 * Firing: the shard's jobs and what makes their runs. Due fires become runs under the job's
 * misfire, overlap and maxRuns rules; a trigger or a backfill makes runs by hand; a new or
 * changed definition moves the job's next fire. Runs are written through the ledger.
 */
export class Firing {
  constructor(
    private readonly host: Pick<ShardHost, "claimTimeoutMs">,
    private readonly store: ShardStore,
    private readonly ledger: RunLedger,
    private readonly workflows: Pick<Workflows, "jobChanged">,
  ) {}

  /** Applies definitions newer than what the shard holds; older or equal versions change nothing. */
  applyJobs(definitions: JobDefinition[], tenants: TenantSettings[], now: number): void {
    for (const tenant of tenants) this.store.putTenant(tenant);
    for (const def of definitions) {
      const row = this.store.getJob(def.id);
      const stored = row && this.store.firedThrough.live(this.store.frequent.current(row)); // its next fire as it stands
      if (stored && stored.version >= def.version) continue;
      // Read again after a restart, a fired job may not say so yet (fired-through.ts, `asChanged`).
      const held = stored && this.store.firedThrough.asChanged(stored, now, (runId) => this.store.getRun(runId) !== null);
      // A changed job starts again as one that is not frequent; its next fires decide.
      if (held) this.store.frequent.leave(held);
      const next = nextFireOnChange(held, def, now);
      this.store.putJob(def, next, next === null ? null : next + jitterOf(def, next), held?.fires ?? 0);
      const tenant = this.store.getTenant(def.tenantId);
      if (held && watchesOpenRuns(def.spec, tenant) && !watchesOpenRuns(held.spec, tenant)) this.store.fires.watchOpenRuns(def.id);
      const stopped = stoppedReason(def);
      if (stopped) this.ledger.cancelPending(def.id, stopped, now);
      // A resume starts the count of failures in a row again (pauseAfterFailures).
      else if (held?.paused) this.store.endFailureStreak(def.id);
      // Workflow runs under way: a resume starts the steps the pause held back, a delete cancels them.
      const job = this.store.getJob(def.id);
      if (job && held) this.workflows.jobChanged(job, held.paused, now);
    }
  }

  /**
   * The due fires of up to `limit` jobs, earliest first, become runs (subject to each job's
   * misfire, overlap and maxRuns rules), and each job moves to its next fire, due after `now`,
   * so the next call goes on with the jobs left. `limit` bounds the work too: a job costs its
   * runs (one at least), and one whose runs would pass `limit` is left due for the next call,
   * unless nothing was fired yet and `first` says this call must make progress (one job's
   * fires are CATCH_UP_CAP and a minute's on-time ones at most, under a tick's TICK_BATCH).
   * The due jobs are read in a page bounded by bytes too (fired-through.ts, DUE_PAGE_BYTES): a
   * page cut short by its bytes ends the tick, and the alarm re-armed for now goes on, so that a
   * tick holds one page of large jobs at most. Returns the work done and whether due jobs were left. Safe to run again: run ids are
   * derived (docs/architecture.md, invariant 2).
   */
  fireDue(now: number, limit: number, first = true): { work: number; more: boolean } {
    const jobs = this.store.fires.dueJobs(now, limit);
    let kept = 0;
    let work = 0;
    let taken = 0;
    for (const job of jobs) {
      const plan = this.store.firedThrough.superseded(job) ? null : this.readyFires(job, now);
      const cost = Math.max(1, plan?.ready.length ?? 0);
      if (work + cost > limit && (work > 0 || !first)) break;
      if (!plan || this.fireJob(job, plan, now) === "kept") kept++;
      work += cost;
      taken++;
    }
    // The jobs taken from jobs_next_due are a prefix of it after the position (frequent ones are not in it).
    const last = jobs.slice(0, taken).findLast((job) => !job.frequent);
    if (last) this.store.firedThrough.passed({ dueAt: last.dueAt as number, jobId: last.id }, kept);
    return { work, more: taken < jobs.length || jobs.length === limit };
  }

  /**
   * The runs the next `fireDue(now, limit)` would make, job by job, read without writing: what
   * admission asks its tenants' gates for before the fire (`Admitter.grantAhead`). A job may come
   * out differently in the fire itself (a call changed it at the await between): its permits are
   * then not used, and given back.
   */
  runsDue(now: number, limit: number): Array<{ job: ShardJob; runIds: string[] }> {
    return this.store.fires.dueJobs(now, limit).flatMap((job) => {
      if (this.store.firedThrough.superseded(job)) return [];
      const runIds = this.readyFires(job, now).ready.map((fire) => scheduledRunId(job.id, fire.at));
      return runIds.length === 0 ? [] : [{ job, runIds }];
    });
  }

  /**
   * One due job's fires (`plan`, from `readyFires`) become runs, and the job moves to its next
   * fire. Its row is left as it was ("kept"; fired-through.ts) when it has nothing more to fire
   * and no fire count to keep, or when its next fire goes on the run its last fire makes.
   */
  private fireJob(job: ShardJob, plan: { ready: DueFire[]; next: number | null }, now: number): "moved" | "kept" {
    const { ready, next } = plan;
    const nextDue = next === null ? null : next + jitterOf(job, next);
    // Due again within a claim timeout: the job is frequent (frequent-jobs.ts).
    const frequent = nextDue !== null && nextDue - now <= this.host.claimTimeoutMs();
    // Nothing more to fire and no fire count to keep: the row is left as it is (fired-through.ts).
    const kept = next === null && !job.frequent && job.spec.schedule.maxRuns === undefined;
    // A next fire: the fire's last run carries it, with the fire count (in runs_next), and the
    // row is left as it is, where moving it is two rows (fired-through.ts). Not when that run
    // exists already (a backfill's, which carries nothing), nor for a workflow, whose step runs
    // retention removes apart from their run.
    const last = ready.at(-1);
    const carried =
      !frequent && !job.frequent && next !== null && job.spec.steps === undefined && last !== undefined
        ? this.store.getRun(scheduledRunId(job.id, last.at)) === null
        : false;
    const fires = job.fires + ready.length;
    for (const fire of ready) {
      const run = {
        id: scheduledRunId(job.id, fire.at),
        jobId: job.id,
        jobVersion: job.version,
        trigger: "schedule" as const,
        scheduledAt: fire.at,
        catchUp: fire.catchUp,
        next: carried && fire === last ? { fireAt: next as number, dueAt: nextDue as number, version: job.version, fires } : undefined,
      };
      this.startRun(job, run, now);
    }
    if (frequent) {
      this.store.frequent.fired(job, next as number, nextDue, ready.length, now);
    } else if (kept || carried) {
      return "kept";
    } else {
      this.store.frequent.leave(job);
      this.store.fires.setNextFire(job.id, next, nextDue, fires);
    }
    return "moved";
  }

  /** The job's fires due by `now` under its misfire, jitter and maxRuns rules, and its next fire after them. */
  private readyFires(job: ShardJob, now: number): { ready: DueFire[]; next: number | null } {
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
      if (!fire.catchUp && fire.at + jitterOf(job, fire.at) > now) {
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
    return { ready, next };
  }

  /**
   * One extra run now: by hand (`triggerKey`), or because a run of another job ended
   * (`chainedFrom`, its onSuccess/onFailure). The same key, or the same run that ended, always
   * names the same run, so a repeat makes nothing.
   */
  trigger(jobId: string, by: TriggeredBy, now: number): Answer<string, "unknown_job" | "job_paused"> {
    const job = this.store.getJob(jobId);
    if (!job || job.deleted) return refuse("unknown_job");
    if (job.paused) return refuse("job_paused"); // nothing runs for a paused job, not even by hand
    const runId = "triggerKey" in by ? triggeredRunId(jobId, by.triggerKey) : chainedRunId(jobId, by.chainedFrom);
    // A chained run is stored as a manual one (the runs table's CHECK names three triggers, and
    // widening it would rebuild the table); its id says what it is, and the API shows "chain".
    this.startRun(job, { id: runId, jobId, jobVersion: job.version, trigger: "manual", scheduledAt: now, catchUp: false }, now);
    return done(runId);
  }

  /**
   * Runs for every fire of the job in [from, to]. Idempotent: a fire that already has a run
   * keeps it (run ids are derived from job and instant). Backfills ignore the overlap policy:
   * the user asked for each of them.
   */
  backfill(jobId: string, from: number, to: number, now: number): Answer<BackfillResult, "unknown_job" | "job_paused" | "too_many"> {
    const job = this.store.getJob(jobId);
    if (!job || job.deleted) return refuse("unknown_job");
    if (job.paused) return refuse("job_paused");
    const fires = firesBetween(job.spec.schedule, job.createdAt, from, to, MAX_BACKFILL + 1);
    if (fires.length > MAX_BACKFILL) return refuse("too_many");
    const created: string[] = [];
    const existing: string[] = [];
    for (const at of fires) {
      const id = scheduledRunId(job.id, at);
      const run = { id, jobId, jobVersion: job.version, trigger: "backfill" as const, scheduledAt: at, catchUp: false };
      (this.startRun(job, run, now) ? created : existing).push(id);
    }
    return done({ created, existing });
  }

  /** buffer_one: a buffered fire starts once its job has no unfinished run left. */
  startBuffered(now: number): void {
    for (const run of this.store.fires.bufferedRuns()) {
      if (this.store.fires.unfinishedRuns(run.jobId).length === 0) this.ledger.sendOn(run, "start", {}, now);
    }
  }

  /** When firing next has work: the earliest due fire of a live job. */
  nextDue(): number | null {
    return this.store.fires.earliestFire();
  }

  /** Creates a run as the job's overlap policy decides (backfills always start). False if it existed. */
  private startRun(job: ShardJob, newRun: NewRun, now: number): boolean {
    // A workflow run is always watched: a resume or a delete finds it among the job's open runs.
    const watched = job.spec.steps !== undefined || watchesOpenRuns(job.spec, this.store.getTenant(job.tenantId));
    const run = { ...newRun, watched };
    const policy = run.trigger === "backfill" ? "allow" : (job.spec.overlap ?? "allow");
    const unfinished = policy === "allow" ? [] : this.store.fires.unfinishedRuns(job.id);
    const decision = decideOverlap(policy, unfinished, policy === "buffer_one" && this.store.fires.bufferedRuns(job.id).length > 0);
    if (decision.run === "skipped") return this.ledger.create(run, now, { state: "skipped", reason: decision.reason });
    if (decision.run === "buffered") return this.ledger.create(run, now, { state: "buffered" });
    if (decision.cancel.length > 0) {
      if (this.store.getRun(run.id)) return false; // a repeated fire must not replace its own run
      for (const old of unfinished) this.ledger.cancel(old, `replaced by run ${run.id}`, now);
    }
    return this.ledger.createQueuedOrWaiting(job, run, now);
  }
}

/** The job's deterministic jitter for the fire at `instant` (docs/architecture.md, invariant 9). */
function jitterOf(job: Pick<JobDefinition, "id" | "spec">, instant: number): number {
  return job.spec.jitter === undefined ? 0 : jitterOffset(job.id, instant, parseDuration(job.spec.jitter)!);
}

/**
 * Next fire of a job whose definition changes. New jobs start from their creation (a job the
 * sweep delivers late still gets what it missed, by its misfire policy); a changed schedule
 * starts afresh from now; anything else, a resume included, keeps its place: fires missed
 * while paused are then due, and the misfire policy decides what becomes of them.
 */
function nextFireOnChange(held: ShardJob | null, def: JobDefinition, now: number): number | null {
  if (def.deleted) return null;
  if (!held) return firstFire(def.spec.schedule, def.createdAt);
  if (JSON.stringify(held.spec.schedule) !== JSON.stringify(def.spec.schedule)) return firstFire(def.spec.schedule, now);
  return held.nextFireAt;
}
