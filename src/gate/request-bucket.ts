import type { GateAnswer } from "./blocks";

/**
 * A tenant's API requests (`requestsPerSecond`), kept by its gate: a bucket of `perSecond`
 * tokens that refills continuously, so a burst of up to a second's worth passes at once. The
 * Worker's isolates take its tokens a block at a time and spend them on their own requests
 * (src/app/request-rate.ts): a block is at most a tenth of a second's worth (and 64), and lapses
 * REQUEST_BLOCK_MS after it was taken, so no isolate spends a token late or keeps one from the
 * others for long.
 *
 * What that guarantees: every request a tenant's key makes spends a token the bucket gave, within
 * REQUEST_BLOCK_MS of its taking. So over any t seconds the tenant's requests are at most
 * `perSecond` × (t + 1 + REQUEST_BLOCK_MS in seconds), the bucket's second of burst and what was
 * taken just before. A 429 may come a little early, while its other isolates hold tokens they
 * have not spent (at most a block each, for at most REQUEST_BLOCK_MS).
 */

/** How long a block of tokens may be spent after the gate gave it. */
export const REQUEST_BLOCK_MS = 1_000;
/** The largest block of tokens, whatever the rate. */
export const MAX_REQUEST_BLOCK = 64;

export interface Bucket {
  tokens: number;
  at: number;
}

/** The most tokens one block may hold at `perSecond`: a tenth of a second's worth, at least 1. */
export const requestBlockOf = (perSecond: number): number => Math.max(1, Math.min(MAX_REQUEST_BLOCK, Math.floor(perSecond / 10)));

/**
 * Up to `want` tokens of `bucket` at `now` (at most a block's worth), or none while not one is
 * there, with how long until one is; the bucket after.
 */
export function takeTokens(bucket: Bucket, perSecond: number, want: number, now: number): { bucket: Bucket; answer: GateAnswer } {
  const elapsed = Math.max(0, now - bucket.at) / 1000;
  const tokens = Math.min(perSecond, bucket.tokens + elapsed * perSecond);
  const granted = Math.min(Math.floor(tokens), Math.max(1, want), requestBlockOf(perSecond));
  if (granted >= 1) return { bucket: { tokens: tokens - granted, at: now }, answer: { granted, until: now + REQUEST_BLOCK_MS } };
  return { bucket: { tokens, at: now }, answer: { granted: 0, retryAfterMs: Math.ceil(((1 - tokens) / perSecond) * 1000) } };
}
