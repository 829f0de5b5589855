import type { StoredTarget, Target, TargetSecrets, TargetView } from "../model/job";
import { loadKeyRing, open, seal } from "./sealing";

/**
 * A target between its API form and its stored form: URL and method stay readable (routing,
 * the SSRF guard, display), headers and body are sealed under the job id, so a sealed target
 * copied onto another job (another tenant's) does not open.
 */

export async function sealTarget(keys: string | undefined, target: Target, jobId: string): Promise<StoredTarget> {
  const secrets: TargetSecrets = {};
  if (target.headers && Object.keys(target.headers).length > 0) secrets.headers = target.headers;
  if (target.body !== undefined) secrets.body = target.body;
  return {
    url: target.url,
    method: target.method,
    headerNames: Object.keys(target.headers ?? {}),
    secrets: Object.keys(secrets).length === 0 ? null : await seal(await loadKeyRing(keys), secrets, jobId),
  };
}

export async function openTarget(keys: string | undefined, target: StoredTarget, jobId: string): Promise<TargetSecrets> {
  return target.secrets === null ? {} : open<TargetSecrets>(await loadKeyRing(keys), target.secrets, jobId);
}

/** What a response shows: header names, never their values. */
export async function viewTarget(keys: string | undefined, target: StoredTarget, jobId: string): Promise<TargetView> {
  const { body } = await openTarget(keys, target, jobId);
  return { url: target.url, method: target.method, headerNames: target.headerNames, ...(body !== undefined && { body }) };
}
