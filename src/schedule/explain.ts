import type { JobSpec } from "../model/job";
import type { RunState } from "../model/run-states";
import { utcOffsetMs } from "./cron";
import { parseDuration } from "./duration";
import { jitterOffset } from "./jitter";
import { MISFIRE_GRACE_MS } from "./misfire";
import { nextFireAfter } from "./next-fire";

/** One decision on the way from a schedule to a run, in the order the shard makes them. */
export interface Decision {
  step: "schedule" | "bounds" | "paused" | "misfire" | "overlap" | "jitter" | "flow_control" | "breaker" | "run";
  /** What this step decided for the fire: it goes on, it stops here, or it may stop here. */
  verdict: "ok" | "stops" | "may_wait" | "may_stop";
  detail: string;
}

/** What the shard holds about the job and the fire, read before explaining. */
export interface ExplainFacts {
  jobId: string;
  spec: Pick<JobSpec, "schedule" | "misfire" | "catchupWindow" | "overlap" | "jitter" | "maxConcurrency" | "ratePerSecond" | "flowControl">;
  createdAt: number;
  paused: boolean;
  deleted: boolean;
  /** The tenant caps its runs in flight. */
  tenantLimited: boolean;
  /** The shard's next fire for the job (null: none left); `completed` when none is left. */
  nextRunAt: number | null;
  completed: boolean;
  /** The job's unfinished runs now, oldest first (for the overlap a fire coming now would meet). */
  unfinished: ReadonlyArray<{ id: string; state: RunState }>;
  /** The breaker of the target's origin now, unless the job opted out (null) or it is plainly closed. */
  breaker: { origin: string; state: string; retryAt: number | null } | null;
}

export interface Explanation {
  /** The fire at or after the instant asked about; null when the schedule has none. */
  fire: { scheduledAt: number; dueAt: number } | null;
  /** The run id the fire becomes (derived from job and instant: docs/architecture.md, invariant 2). */
  runId: string | null;
  decisions: Decision[];
}

/**
 * "Why didn't it run?": the chain of decisions the shard made, or will make, for the fire at or
 * after `at`, from the same functions the shard fires by (next-fire, misfire grace, overlap
 * policy, jitter). `run` is that fire's run if it exists. Pure: facts in, explanation out.
 */
export function explainFire(
  facts: ExplainFacts,
  at: number,
  now: number,
  runIdOf: (scheduledAt: number) => string,
  run: { state: RunState; error: string | null; catchUp: boolean } | null,
): Explanation {
  const { spec } = facts;
  const schedule = spec.schedule;
  const decisions: Decision[] = [];
  const say = (step: Decision["step"], verdict: Decision["verdict"], detail: string) => decisions.push({ step, verdict, detail });

  const scheduledAt = fireAtOrAfter(schedule, facts.createdAt, at);
  if (scheduledAt === null) {
    say("schedule", "stops", noFireDetail(schedule, at));
    return { fire: null, runId: null, decisions };
  }
  say("schedule", "ok", matchDetail(schedule, scheduledAt));

  const bounds = [
    schedule.startAt && `from ${schedule.startAt}`,
    schedule.endAt && `until ${schedule.endAt}`,
    schedule.maxRuns !== undefined && `at most ${schedule.maxRuns} runs`,
  ].filter(Boolean);
  if (schedule.maxRuns !== undefined && facts.completed && run === null) {
    say("bounds", "stops", `maxRuns ${schedule.maxRuns} was reached before this fire: the job has no fire left`);
  } else if (bounds.length > 0) say("bounds", "ok", `within the schedule's bounds (${bounds.join(", ")})`);

  const past = scheduledAt <= now;
  if (facts.deleted) say("paused", "stops", "the job is deleted: it fires no more");
  else if (facts.paused)
    say(
      "paused",
      past ? "stops" : "may_stop",
      past
        ? "the job is paused now; a fire that falls while it is paused is missed, and the misfire policy decides on resume"
        : "the job is paused: this fire runs only if the job is resumed before it",
    );
  else say("paused", "ok", "the job is not paused");

  const missedGrace = `${MISFIRE_GRACE_MS / 1000} s`;
  const policy = spec.misfire ?? "fire_once";
  const policyText = {
    skip: "skip: a missed fire is dropped",
    fire_once: "fire_once: of the fires missed, only the latest runs, as a catch-up",
    catch_up: `catch_up: each missed fire within catchupWindow (${spec.catchupWindow ?? "1h"}) runs, at most 100`,
  }[policy];
  if (run?.catchUp) say("misfire", "ok", `this fire was handled more than ${missedGrace} late and ran as a catch-up (${policyText})`);
  else if (past && run === null && schedule.at === undefined)
    say(
      "misfire",
      "stops",
      `no run was made for this fire: it was missed (the job paused, or its shard not running) and the policy is ${policyText}`,
    );
  else say("misfire", "ok", `handled within ${missedGrace} of its instant it is on time; otherwise ${policyText}`);

  const overlap = spec.overlap ?? "allow";
  if (run?.state === "skipped") say("overlap", "stops", run.error ?? "skipped by the overlap policy");
  else if (overlap === "allow") say("overlap", "ok", "overlap allow: it runs whatever the job's other runs do");
  else if (!past) {
    const previous = facts.unfinished.at(-1);
    say(
      "overlap",
      previous ? "may_stop" : "ok",
      previous
        ? `overlap ${overlap}: run ${previous.id} is ${previous.state} now; if it still is at the fire, this fire is ${overlap === "forbid" ? "skipped" : overlap === "buffer_one" ? "buffered (or skipped if a fire already waits)" : "started and that run cancelled"}`
        : `overlap ${overlap}: no run of the job is unfinished now`,
    );
  } else say("overlap", "ok", `overlap ${overlap}: it did not stop this fire`);

  const windowMs = spec.jitter === undefined ? 0 : (parseDuration(spec.jitter) ?? 0);
  const offset = jitterOffset(facts.jobId, scheduledAt, windowMs);
  const dueAt = scheduledAt + offset;
  if (windowMs > 0)
    say("jitter", "ok", `jitter ${spec.jitter}: due ${offset} ms after its instant, at ${iso(dueAt)} (the same offset every time)`);

  const limits = [
    spec.maxConcurrency !== undefined && `maxConcurrency ${spec.maxConcurrency}`,
    spec.ratePerSecond !== undefined && `ratePerSecond ${spec.ratePerSecond}`,
    spec.flowControl !== undefined && `its flow-control group ${JSON.stringify(spec.flowControl.key)}`,
    facts.tenantLimited && "the tenant's runs-in-flight limit",
  ].filter(Boolean);
  if (limits.length > 0) say("flow_control", "may_wait", `the run may wait (state waiting) for ${limits.join(", ")}`);

  const b = facts.breaker;
  if (b && b.state !== "closed") {
    const until = b.retryAt === null ? "" : ` until ${iso(b.retryAt)}`;
    say(
      "breaker",
      "may_wait",
      `the circuit breaker for ${b.origin} is ${b.state.replace("_", "-")}: runs for it wait${until}, attempts unspent`,
    );
  }

  const runId = runIdOf(scheduledAt);
  if (run) say("run", "ok", `run ${runId} is ${run.state}${run.error && run.state !== "skipped" ? `: ${run.error}` : ""}`);
  else if (!past)
    say(
      "run",
      "ok",
      `not due yet: run ${runId} is made at ${iso(dueAt)}${facts.nextRunAt === scheduledAt ? " (the job's next fire)" : ""}`,
    );
  else
    say(
      "run",
      "stops",
      `there is no run ${runId}${decisions.some((d) => d.verdict === "stops") ? "; see the step that stopped it" : " (it may have been removed by retention)"}`,
    );
  return { fire: { scheduledAt, dueAt }, runId, decisions };
}

/** The job's fire at or after `at` (what explain is about), by the function the shard fires by. */
export function fireAtOrAfter(schedule: JobSpec["schedule"], createdAt: number, at: number): number | null {
  if (schedule.at !== undefined) return Date.parse(schedule.at) >= at ? Date.parse(schedule.at) : null;
  return nextFireAfter(schedule, createdAt, at - 1);
}

const iso = (ms: number) => new Date(ms).toISOString();

function noFireDetail(schedule: JobSpec["schedule"], at: number): string {
  if (schedule.at !== undefined) return `the one-off fire at ${schedule.at} is before ${iso(at)}`;
  if (schedule.endAt !== undefined) return `no fire at or after ${iso(at)}: the schedule ends at ${schedule.endAt}`;
  return `the schedule has no fire at or after ${iso(at)}`;
}

/** The match, and for a cron in a zone whose offset changes that day, which DST rule applied. */
function matchDetail(schedule: JobSpec["schedule"], fire: number): string {
  if (schedule.at !== undefined) return `the one-off instant ${iso(fire)}`;
  if (schedule.every !== undefined) return `every ${schedule.every} from ${schedule.startAt ?? "the job's creation"}: ${iso(fire)}`;
  const zone = schedule.timezone ?? "UTC";
  const text = `cron "${schedule.cron}" in ${zone} matches ${iso(fire)} (${wallClock(fire, zone)} local)`;
  const before = utcOffsetMs(fire - 86_400_000, zone);
  const after = utcOffsetMs(fire + 86_400_000, zone);
  if (before === after) return text;
  const change = before < after ? "springs forward" : "falls back";
  return `${text}; the clock ${change} within a day of it: a fixed local time the change skips fires when the gap ends, one it repeats fires once, at its first pass; other times fire at each instant the clock shows them`;
}

function wallClock(t: number, zone: string): string {
  return new Intl.DateTimeFormat("en-GB", {
    timeZone: zone,
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    hour12: false,
  }).format(t);
}
