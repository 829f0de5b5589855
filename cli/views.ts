import type { Job, Run } from "edgecron/client";
import { cell, details, table } from "./output.ts";
import { formatInstant, localZone } from "./time.ts";

/** How jobs and runs read in a terminal. Pure: text in, text out. */

const jobState = (job: Job): string => (job.completed ? "completed" : job.paused ? "paused" : "active");

export function jobsTable(jobs: Job[], zone = localZone()): string {
  return table(
    ["ID", "NAME", "SCHEDULE", `NEXT RUN (${zone})`, "STATE"],
    jobs.map((j) => [j.id, j.name ?? "", j.description, formatInstant(j.nextRunAt, zone), jobState(j)]),
  );
}

export function jobDetails(job: Job, zone = localZone()): string {
  const jobZone = job.schedule.timezone;
  const next =
    job.nextRunAt === null
      ? "none"
      : [formatInstant(job.nextRunAt, zone), jobZone && jobZone !== zone ? `(${formatInstant(job.nextRunAt, jobZone)})` : ""]
          .filter(Boolean)
          .join(" ");
  const { target } = job;
  return details([
    ["id", job.id],
    ["name", job.name ?? ""],
    ["state", jobState(job)],
    ["schedule", `${job.description}\n${JSON.stringify(job.schedule)}`],
    ["next run", next],
    ...(target
      ? ([
          ["target", `${target.method} ${target.url}`],
          ["headers", target.headerNames.join(", ")],
          ["body", cell(target.body)],
        ] as Array<[string, string]>)
      : []),
    ...(job.steps ?? []).map((step): [string, string] => [
      `step ${step.id}`,
      `${step.target.method} ${step.target.url}${step.after?.length ? ` after ${step.after.join(", ")}` : ""}${step.when ? ` (${step.when})` : ""}`,
    ]),
    ["retry", cell(job.retry)],
    ["timeout", `${job.timeoutMs} ms`],
    ["overlap / misfire", `${job.overlap} / ${job.misfire} (catch-up window ${job.catchupWindow})`],
    ["limits", limitsOf(job)],
    ["version", String(job.version)],
    ["created", formatInstant(job.createdAt, zone)],
    ["updated", formatInstant(job.updatedAt, zone)],
  ]);
}

/** The optional settings a job has, or "none". */
function limitsOf(job: Job): string {
  const set = Object.entries({
    jitter: job.jitter,
    maxConcurrency: job.maxConcurrency,
    ratePerSecond: job.ratePerSecond,
    retention: job.retention,
  })
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k} ${cell(v)}`);
  return set.length === 0 ? "none" : set.join(", ");
}

export function runsTable(runs: Run[], zone = localZone()): string {
  return table(
    ["ID", "STATE", "TRIGGER", `SCHEDULED (${zone})`, "ATTEMPTS", "STATUS", "ERROR"],
    runs.map((r) => [r.id, r.state, r.trigger, formatInstant(r.scheduledAt, zone), String(r.attempts), cell(r.status), cell(r.error)]),
  );
}

export function runDetails(run: Run, zone = localZone()): string {
  const head = details([
    ["id", run.id],
    ["job", `${run.jobId} (version ${run.jobVersion})`],
    ["state", run.state],
    ["trigger", `${run.trigger}${run.catchUp ? " (catch-up)" : ""}`],
    ["scheduled", formatInstant(run.scheduledAt, zone)],
    ["started", formatInstant(run.startedAt, zone)],
    ["finished", formatInstant(run.finishedAt, zone)],
    ["status", cell(run.status)],
    ["error", cell(run.error)],
    ["result", cell(run.result)],
  ]);
  const attempts = run.attemptLog ?? [];
  if (attempts.length === 0) return head;
  const log = table(
    ["ATTEMPT", "STARTED", "OUTCOME", "STATUS", "DURATION", "ERROR"],
    attempts.map((a) => [
      String(a.attempt),
      formatInstant(a.startedAt, zone),
      a.outcome,
      cell(a.status),
      a.durationMs === null ? "" : `${a.durationMs} ms`,
      [a.error, a.late && `late: ${a.late}`].filter(Boolean).join("; "),
    ]),
  );
  return `${head}\n${log}`;
}
