import { invalidField } from "../api/errors";
import { config } from "../config";
import type { Step, StoredStep, Target } from "../model/job";
import { policyOf, targetRefusal } from "../security/target-guard";
import { sealTarget } from "../security/targets";

/** What a job calls, as it is accepted when the job is created or changed. */

/** The SSRF guard's verdict, then the target sealed for storage. */
export async function acceptTarget(env: Env, target: Target, jobId: string, field = "target") {
  const refusal = targetRefusal(target.url, policyOf(config(env)));
  if (refusal) throw invalidField(`${field}.url`, refusal);
  return sealTarget(env.ENCRYPTION_KEYS, target, jobId);
}

/** A workflow's steps, each target checked and sealed as a job's target is (bound to the job id). */
export async function acceptSteps(env: Env, steps: Step[], jobId: string): Promise<StoredStep[]> {
  return Promise.all(steps.map(async (step, i) => ({ ...step, target: await acceptTarget(env, step.target, jobId, `steps.${i}.target`) })));
}
