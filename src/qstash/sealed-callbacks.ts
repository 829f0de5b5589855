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

/** Whether a stored callback needs sealing again: under another key than `currentKid`, or in clear. */
export function callbackNeedsResealing(callback: CallbackOptions | SealedCallback, currentKid: string): boolean {
  return !isSealed(callback) || callback.secrets.kid !== currentKid;
}

/**
 * The message's meta with its callbacks sealed under the ring's current key (after a rotation put
 * a new key first), those stored in clear too; the same meta when none needs it. Throws when a
 * callback's key is no longer in the ring.
 */
export async function resealCallbacks(keys: string | undefined, meta: QstashMeta, tenantId: string): Promise<QstashMeta> {
  const kid = (await keyRing(keys)).current;
  const stale = [meta.callback, meta.failureCallback].some((c) => c !== undefined && callbackNeedsResealing(c, kid));
  if (!stale) return meta;
  const opened = async (callback: CallbackOptions | SealedCallback | undefined) =>
    callback && (isSealed(callback) && callback.secrets.kid === kid ? callback : await openCallback(keys, callback, tenantId));
  return sealCallbacks(
    keys,
    {
      ...meta,
      ...(meta.callback && { callback: await opened(meta.callback) }),
      ...(meta.failureCallback && { failureCallback: await opened(meta.failureCallback) }),
    },
    tenantId,
  );
}

/** The origin of a stored callback's URL, which stays readable: what a `read` key is shown of it. */
export function callbackOriginOf(callback: CallbackOptions | SealedCallback): string {
  return isSealed(callback) ? callback.origin : reducedUrl(callback.url);
}
