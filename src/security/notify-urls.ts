import type { Notify, SealedNotify, StoredNotify } from "../model/job";
import { open, type Sealed, seal } from "./sealing";
import { keyRing } from "./targets";

/**
 * A notification's URL at rest: sealed like a target's (src/security/targets.ts), since a
 * webhook URL is as often as not its own credential. Its events and origin stay readable. It is
 * sealed under the tenant (a job's `notify` and the tenant's default alike): the shard copies it,
 * still sealed, into its notifications outbox, and the consumer opens it to send.
 */

/** The additional data a tenant's notification URLs are sealed under. */
const contextOf = (tenantId: string) => `notify:${tenantId}`;

const isSealed = (notify: StoredNotify): notify is SealedNotify => "secrets" in notify;

export async function sealNotify(keys: string | undefined, notify: Notify, tenantId: string): Promise<SealedNotify> {
  const secrets = await seal(await keyRing(keys), { url: notify.url }, contextOf(tenantId));
  return { on: notify.on, origin: new URL(notify.url).origin, secrets };
}

/**
 * What the shard keeps of a receiver in its outbox and hands to the consumer: the sealed URL, or
 * the URL in clear of one stored before URLs were sealed.
 */
export function sealedUrlOf(notify: StoredNotify): string | Sealed {
  return isSealed(notify) ? notify.secrets : notify.url;
}

/** The receiver's URL, opened; `url` as `sealedUrlOf` gave it. */
export async function openNotifyUrl(keys: string | undefined, url: string | Sealed, tenantId: string): Promise<string> {
  if (typeof url === "string") return url;
  return (await open<{ url: string }>(await keyRing(keys), url, contextOf(tenantId))).url;
}

/** The origin of a receiver, which stays readable: what a log line may show of it. */
export function notifyOriginOf(notify: StoredNotify): string {
  return isSealed(notify) ? notify.origin : new URL(notify.url).origin;
}

/** Whether a stored receiver needs sealing again: under an older key, or its URL still in clear. */
export function notifyNeedsResealing(notify: StoredNotify, currentKid: string): boolean {
  return !isSealed(notify) || notify.secrets.kid !== currentKid;
}

/** A stored receiver sealed under the ring's current key; as it was when it already is. */
export async function resealNotify(keys: string | undefined, notify: StoredNotify, tenantId: string): Promise<SealedNotify> {
  const ring = await keyRing(keys);
  if (isSealed(notify) && notify.secrets.kid === ring.current) return notify;
  return sealNotify(keys, { on: notify.on, url: await openNotifyUrl(keys, sealedUrlOf(notify), tenantId) }, tenantId);
}

/** A receiver as responses show it; `reduced` when it is only the origin a `read` key may see. */
export type NotifyView = Notify & { reduced?: true };

/**
 * What a response shows: the URL opened if the caller sees sealed values whole (`whole`),
 * otherwise its origin (src/security/reduced.ts). One that cannot be opened (its key was dropped
 * from ENCRYPTION_KEYS) shows its origin rather than failing the whole answer.
 */
export async function viewNotify(keys: string | undefined, notify: StoredNotify, tenantId: string, whole: boolean): Promise<NotifyView> {
  if (!whole) return { url: notifyOriginOf(notify), on: notify.on, reduced: true };
  try {
    return { url: await openNotifyUrl(keys, sealedUrlOf(notify), tenantId), on: notify.on };
  } catch (err) {
    console.error(`tenant ${tenantId}: notification URL not shown: ${(err as Error).message}`);
    return { url: notifyOriginOf(notify), on: notify.on };
  }
}

/** What a response shows of a receiver as the API was given it, in clear: what viewNotify shows once it is sealed. */
export function viewGivenNotify(notify: Notify, whole: boolean): NotifyView {
  return whole ? { url: notify.url, on: notify.on } : { url: new URL(notify.url).origin, on: notify.on, reduced: true };
}
