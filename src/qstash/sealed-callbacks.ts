import { reducedUrl } from "../security/reduced";
import { open, seal } from "../security/sealing";
import { keyRing } from "../security/targets";
import type { CallbackOptions, QstashMeta, SealedCallback } from "./meta";

/**
 * A message's callbacks at rest: a callback's URL is a receiver's as a notification's is, and
 * its `-Callback-Forward-*` headers are often its credentials, so both are sealed like a
 * target's (src/security/targets.ts), under the tenant; only the URL's origin stays readable.
 * The consumer opens a callback when it publishes it (src/consumer/qstash-callbacks.ts).
 */

const contextOf = (tenantId: string) => `qstash-callback:${tenantId}`;

const isSealed = (callback: CallbackOptions | SealedCallback): callback is SealedCallback => "secrets" in callback;

/** The message's meta with its callbacks sealed, for storage. */
export async function sealCallbacks(keys: string | undefined, meta: QstashMeta, tenantId: string): Promise<QstashMeta> {
  const sealed = async (callback: CallbackOptions | SealedCallback): Promise<SealedCallback> =>
    isSealed(callback)
      ? callback
      : { origin: new URL(callback.url).origin, secrets: await seal(await keyRing(keys), callback, contextOf(tenantId)) };
  return {
    ...meta,
    ...(meta.callback && { callback: await sealed(meta.callback) }),
    ...(meta.failureCallback && { failureCallback: await sealed(meta.failureCallback) }),
  };
}

/** A stored callback, opened; one stored before callbacks were sealed comes back as it is. */
export async function openCallback(
  keys: string | undefined,
  callback: CallbackOptions | SealedCallback,
  tenantId: string,
): Promise<CallbackOptions> {
  return isSealed(callback) ? open<CallbackOptions>(await keyRing(keys), callback.secrets, contextOf(tenantId)) : callback;
}

/** The origin of a stored callback's URL, which stays readable: what a `read` key is shown of it. */
export function callbackOriginOf(callback: CallbackOptions | SealedCallback): string {
  return isSealed(callback) ? callback.origin : reducedUrl(callback.url);
}
