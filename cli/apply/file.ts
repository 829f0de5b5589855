import type { CreateJob } from "edgecron/client";
import { UsageError } from "../exit.ts";
import { readDefinitionFile } from "../job-input.ts";
import { CHAIN_FIELDS, JOB_FIELDS } from "./fields.ts";

/**
 * A job as an apply file declares it: the API's job fields, a name that identifies it, and
 * whether it is paused; its onSuccess/onFailure name other jobs by name, not id (chains.ts).
 */
export type DeclaredJob = CreateJob & { name: string; paused?: boolean };

/** The fields a declared job may have: POST /v1/jobs's, and `paused`. Anything else is a typo to catch before a call. */
const FIELDS = new Set<string>(["name", ...JOB_FIELDS, ...CHAIN_FIELDS, "paused"]);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * The jobs of an apply file (`jobs:`, a list), checked for what apply itself relies on: each
 * has a unique name, a schedule and a target or steps, and no unknown field. The values are the API's to
 * judge: a dry run does not validate them, the apply's first refused call does (exit 1).
 */
export function declaredJobs(content: unknown, fileName: string): DeclaredJob[] {
  const where = (i: number, path = "") => `${fileName}: jobs[${i}]${path}`;
  if (!isObject(content) || !Array.isArray(content.jobs)) throw new UsageError(`${fileName} must hold a "jobs:" list`);
  const unknownTop = Object.keys(content).filter((k) => k !== "jobs");
  if (unknownTop.length > 0) throw new UsageError(`${fileName}: unknown top-level field ${unknownTop.join(", ")} (only "jobs")`);
  const seen = new Map<string, number>();
  return content.jobs.map((job: unknown, i) => {
    if (!isObject(job)) throw new UsageError(`${where(i)} must be an object`);
    if (typeof job.name !== "string" || job.name.trim() === "")
      throw new UsageError(`${where(i, ".name")}: every job needs a name: apply matches jobs by it`);
    const first = seen.get(job.name);
    if (first !== undefined)
      throw new UsageError(`${where(i, ".name")}: "${job.name}" is also the name of jobs[${first}]; names must be unique`);
    seen.set(job.name, i);
    const unknown = Object.keys(job).filter((k) => !FIELDS.has(k));
    if (unknown.length > 0) throw new UsageError(`${where(i)} ("${job.name}"): unknown field ${unknown.join(", ")}`);
    if (!isObject(job.schedule)) throw new UsageError(`${where(i, ".schedule")} ("${job.name}"): a schedule object is required`);
    if (job.schedule.delay !== undefined) {
      throw new UsageError(`${where(i, ".schedule.delay")} ("${job.name}"): a delay is counted from each apply's creation; use at`);
    }
    const hasTarget = isObject(job.target) && typeof job.target.url === "string";
    if (hasTarget === Array.isArray(job.steps)) {
      throw new UsageError(`${where(i, ".target")} ("${job.name}"): a target with a url, or a workflow's steps, is required (one of them)`);
    }
    if (job.paused !== undefined && typeof job.paused !== "boolean")
      throw new UsageError(`${where(i, ".paused")} ("${job.name}"): true or false`);
    return job as DeclaredJob;
  });
}

export function readApplyFile(path: string): DeclaredJob[] {
  return declaredJobs(readDefinitionFile(path), path);
}
