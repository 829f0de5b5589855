import type { Endpoint } from "../catalog/qstash";
import { open, type Sealed, seal } from "../security/sealing";
import { keyRing } from "../security/targets";

/**
 * The /v2 surface's URLs kept beside its messages: each is a destination, and a destination's
 * URL is sealed (src/security/targets.ts), so these are too. A URL group's endpoints are sealed
 * whole, under the group's tenant and name; a deduplicated publish's remembered answer, under
 * its tenant.
 */

const contextOf = (tenantId: string, name: string) => `qstash-topic:${tenantId}:${name}`;
const dedupContextOf = (tenantId: string) => `qstash-dedup:${tenantId}`;

export async function sealEndpoints(keys: string | undefined, endpoints: Endpoint[], tenantId: string, name: string): Promise<Sealed> {
  return seal(await keyRing(keys), endpoints, contextOf(tenantId, name));
}

/** A group's endpoints as stored, opened; a group written before endpoints were sealed holds them in clear. */
export async function openEndpoints(
  keys: string | undefined,
  stored: Endpoint[] | Sealed,
  tenantId: string,
  name: string,
): Promise<Endpoint[]> {
  return Array.isArray(stored) ? stored : open<Endpoint[]>(await keyRing(keys), stored, contextOf(tenantId, name));
}

/** A remembered answer's URL, sealed: what qstash_dedup keeps (the JSON of its `Sealed`). */
export async function sealDedupUrl(keys: string | undefined, url: string, tenantId: string): Promise<string> {
  return JSON.stringify(await seal(await keyRing(keys), url, dedupContextOf(tenantId)));
}

/** A remembered answer's URL, opened; one remembered before these were sealed is the URL itself. */
export async function openDedupUrl(keys: string | undefined, stored: string, tenantId: string): Promise<string> {
  if (!stored.startsWith("{")) return stored;
  return open<string>(await keyRing(keys), JSON.parse(stored) as Sealed, dedupContextOf(tenantId));
}
