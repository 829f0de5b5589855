import { invalidField } from "../api/errors";
import { config } from "../config";
import type { Notify, SealedNotify } from "../model/job";
import { sealNotify } from "../security/notify-urls";
import { policyOf, targetRefusal } from "../security/target-guard";

/**
 * A notification URL (a job's, or a tenant's default) passes the same SSRF guard as a target,
 * and is sealed for storage; the consumer checks it again when it sends. `field` names it in
 * the 400.
 */
export async function acceptNotify(env: Env, notify: Notify, tenantId: string, field = "notify.url"): Promise<SealedNotify> {
  const refusal = targetRefusal(notify.url, policyOf(config(env)));
  if (refusal) throw invalidField(field, refusal);
  return sealNotify(env.ENCRYPTION_KEYS, notify, tenantId);
}
