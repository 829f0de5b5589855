import { LRUCache } from "lru-cache";
import type { tenantOfKey } from "../catalog/tenants";

/**
 * The API keys this isolate found live, each with its tenant and grant, trusted for
 * KEY_CACHE_MS: a tenant's steady requests then cost no D1 read each to authenticate. The price
 * is that a key revoked (or a tenant changed) through another isolate still passes here, with
 * what it held, until its entry lapses; a revocation or change made through this isolate drops
 * the entries it concerns at once. docs/security.md says how long a revoked key may pass.
 *
 * A lookup that began before such a drop is not remembered when it ends: it may have read the
 * key as it was before.
 */

export type LiveKey = NonNullable<Awaited<ReturnType<typeof tenantOfKey>>>;

/** How long a key found live is trusted without asking D1 again: the longest a revoked key may still pass elsewhere. */
export const KEY_CACHE_MS = 5_000;
/** Keys remembered at most: a flood of distinct live keys must not grow the isolate's memory. */
const MAX_KEYS = 1_000;

// ttlResolution 0: the clock is read at each look-up. The default caches it until a timer fires,
// and a timer set by a request that has ended may never fire in a Worker: entries would not lapse.
const live = new LRUCache<string, LiveKey>({ max: MAX_KEYS, ttl: KEY_CACHE_MS, ttlResolution: 0 });
/** Bumped by every drop: a lookup begun under an older one is not remembered. */
let drops = 0;

/** The live key of `hash`, from memory when this isolate found it live within KEY_CACHE_MS; else `lookUp`'s answer. */
export async function cachedLiveKey(hash: string, lookUp: () => Promise<LiveKey | null>): Promise<LiveKey | null> {
  const known = live.get(hash);
  if (known) return known;
  const asOf = drops;
  const found = await lookUp();
  if (found && asOf === drops) live.set(hash, frozen(found));
  return found;
}

/** Keys revoked through this isolate: they stop passing here at once. */
export function forgetKeys(ids: readonly string[]): void {
  forget((k) => ids.includes(k.key.id));
}

/** A tenant changed through this isolate (its limits, its settings): its keys are looked up again, so the change holds here at once. */
export function forgetTenant(tenantId: string): void {
  forget((k) => k.tenant.id === tenantId);
}

/** Forgets every key, as a fresh isolate would (for tests that revoke keys in D1 directly, as another isolate does). */
export function forgetAllKeys(): void {
  forget(() => true);
}

function forget(which: (k: LiveKey) => boolean): void {
  drops++;
  const gone = [...live.entries()].filter(([, k]) => which(k)).map(([hash]) => hash);
  for (const hash of gone) live.delete(hash);
}

/** One object serves every request that presents the key: none may change it for the others. */
function frozen(found: LiveKey): LiveKey {
  Object.freeze(found.tenant.limits);
  Object.freeze(found.tenant);
  Object.freeze(found.key.scopes);
  Object.freeze(found.key);
  return Object.freeze(found);
}
