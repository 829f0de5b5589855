/**
 * What a tenant's gate answers an isolate that asks for a block of an allowance it keeps (API
 * requests, room for jobs): `granted` (at least 1, at most what was asked) to be spent before
 * `until`, and for room its lease `epoch` (blocks of different epochs are not spent together);
 * or none, and how long until asking again may get some. src/app/allotments.ts is the
 * isolate's side.
 */
export type GateAnswer = { granted: number; until: number; epoch?: number } | { granted: 0; retryAfterMs: number };
