import { cachedLiveKey } from "../app/key-cache";
import { hashKey, tenantOfKey } from "../catalog/tenants";
import { addressName, prefixName, TOTALS_OBJECT, throttleObjectOf } from "../gate/sign-in-names";
import type { SignInRefusal } from "../gate/sign-in-throttle";
import { signInStub } from "../stubs";
import type { AppContext } from "./context";
import { ApiError } from "./errors";

/**
 * Failed sign-ins are limited per client address (IPv6 by /64) and per key prefix
 * (src/gate/failure-budget.ts), kept by one of a fixed set of SignInThrottle objects
 * (src/gate/sign-in-names.ts). Only a credential found wrong is throttled: a valid admin token
 * or a live key passes whatever failures its address or prefix have, since both are shared (a
 * key's prefix is public, and every Worker calling from Cloudflare has one address) and refusing
 * on them let anyone lock a tenant out.
 *
 * The trade-off is what a throttled client's junk costs. Telling a live key from junk needs the
 * key's lookup, so a key never seen before costs one D1 query (by its hash's index) even from a
 * throttled client; no object is called for it once this isolate knows the client is throttled.
 * What can be refused unread is: a token of no key's form (never looked up), and a key this
 * isolate already found wrong (remembered below: a key is made at random and never comes back
 * once revoked, so a wrong key stays wrong). Live keys are remembered only briefly
 * (src/app/key-cache.ts), so that a revoked key stops working within seconds in every isolate.
 */

/** Who this isolate knows to be throttled, until when. */
const refusedUntil = new Map<string, number>();
/** Hashes of keys found wrong (not live): their next try costs no D1 query. */
const wrongKeys = new Set<string>();
/** Each memory's bound: a flood of distinct addresses or keys must not grow it for ever. */
const MAX_REMEMBERED = 10_000;

/** What a request's failures are counted against: its client address (when known) and the key's prefix (when it is one). */
export function throttleNames(c: AppContext, keyPrefix: string | null): string[] {
  // Without CF-Connecting-IP (a call made inside the runtime, as tests make them) there is no
  // address to hold to account; every request through Cloudflare's edge has one.
  const address = c.req.header("CF-Connecting-IP");
  return [...(address ? [addressName(address)] : []), ...(keyPrefix ? [prefixName(keyPrefix)] : [])];
}

/** The live key presented, or null; a key already found wrong is not looked up again, nor one found live just before. */
export async function liveKeyOf(c: AppContext, presented: string): ReturnType<typeof tenantOfKey> {
  const hash = await hashKey(presented);
  if (wrongKeys.has(hash)) return null;
  const found = await cachedLiveKey(hash, () => tenantOfKey(c.env.DB, hash));
  if (!found) {
    if (wrongKeys.size >= MAX_REMEMBERED) wrongKeys.clear();
    wrongKeys.add(hash);
  }
  return found;
}

const throttled = (retryAfterMs: number) =>
  new ApiError(
    429,
    "sign_in_throttled",
    "too many failed sign-ins from this client or for this key prefix; retry after the Retry-After seconds",
    {
      "Retry-After": String(Math.max(1, Math.ceil(retryAfterMs / 1000))),
    },
  );

/**
 * A failed sign-in (a credential missing or found wrong); the error to answer: 401 while allowed,
 * else 429. A client this isolate knows to be throttled is refused with no object call; else the
 * failure is recorded against every name, and a name whose next try must wait is remembered.
 */
export async function failedSignIn(c: AppContext, names: string[], invalid: ApiError): Promise<ApiError> {
  const known = Math.max(0, ...names.map((name) => refusedUntil.get(name) ?? 0));
  if (known > Date.now()) {
    count(c, "throttled");
    return throttled(known - Date.now());
  }
  const answers = await Promise.all(names.map((name) => signInStub(c.env, throttleObjectOf(name)).fail(name)));
  if (refusedUntil.size >= MAX_REMEMBERED) refusedUntil.clear();
  const now = Date.now();
  for (const [i, name] of names.entries()) if (answers[i]!.blockedMs > 0) refusedUntil.set(name, now + answers[i]!.blockedMs);
  const wait = Math.max(0, ...answers.map((a) => a.refusedMs));
  if (wait === 0) {
    count(c, "invalid");
    return invalid;
  }
  count(c, "throttled");
  return throttled(wait);
}

/**
 * Counted after the answer, in one object (`totals`) for the whole deployment: so that a flood
 * does not become as many calls to it, an isolate sends what it counted in one call at a time,
 * the next carrying all that came meanwhile (a count can lag a call behind, or be lost with the
 * isolate; never counted twice).
 */
const pending: Record<SignInRefusal, number> = { invalid: 0, throttled: 0 };
let sending = false;

function count(c: AppContext, refusal: SignInRefusal): void {
  pending[refusal]++;
  if (sending) return;
  sending = true;
  const send = async (): Promise<void> => {
    try {
      while (pending.invalid + pending.throttled > 0) {
        const batch = { ...pending };
        pending.invalid = 0;
        pending.throttled = 0;
        await signInStub(c.env, TOTALS_OBJECT)
          .count(batch)
          .catch((err: unknown) => console.error("sign-in refusals not counted", (err as Error).message));
      }
    } finally {
      sending = false;
    }
  };
  const sent = send();
  try {
    c.executionCtx.waitUntil(sent);
  } catch {
    // No execution context (app.request in a test): the count still runs, unawaited.
  }
}
