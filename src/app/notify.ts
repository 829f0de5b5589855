import { invalidField } from "../api/errors";
import { config } from "../config";
import type { Notify } from "../model/job";
import { targetRefusal } from "../security/target-guard";

/**
 * A notification URL (a job's, or a tenant's default) passes the same SSRF guard as a target;
 * the consumer checks it again when it sends. `field` names it in the 400.
 */
export function acceptNotify(env: Env, notify: Notify, field = "notify.url"): Notify {
  const refusal = targetRefusal(notify.url, { allowPrivate: config(env).allowPrivateTargets });
  if (refusal) throw invalidField(field, refusal);
  return notify;
}
