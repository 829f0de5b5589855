import { type JobSpec, originOf, type StoredTarget } from "../model/job";
import type { BreakerKey } from "../protocol/queue-messages";

/**
 * A circuit breaker for the calls one tenant's jobs make to one origin (docs/jobs-and-schedules.md,
 * "Circuit breakers"). It is there for an origin that is down, not for an endpoint that is
 * broken: one job's own errors cost that job its own retries, never its neighbours' calls.
 *
 * Closed: calls go through. Only what says the origin itself is down counts against it (no
 * answer at all, 502/503/504, 429, a proxy's 52x: `originHealth`); an endpoint's own error (a
 * 500) says nothing of the others, and any answer below 500 (a 404 too) says the origin is up.
 * It opens on `FAILURES_TO_OPEN` of those failures in a row (no answer saying the origin is up
 * in between) within `FAILURE_WINDOW_MS`, counting at most `FAILURES_PER_CALLER` of any one
 * caller (a job, or a workflow step): so never on one endpoint alone, however often it fails.
 * Open: runs for the origin wait (their attempts are not spent) until `retryAt`. Then
 * half-open: one run goes through as a probe, taken from the caller that probed least
 * recently (a held one whose turn it is is waited for, `PROBE_TURN_MS`), so the probes go
 * round the held jobs rather than to one failing job every time.
 * Any job's answer saying the origin is up closes the breaker; the probe's failure opens it
 * again for twice as long (at most `MAX_COOLDOWN_MS`). A probe that never reports (its consumer
 * died) is replaced after `PROBE_LEASE_MS`. An origin down longer than `MAX_HOLD_MS` holds no
 * more runs: they end dead (`giveUp`), so runs cannot pile up behind an origin that never returns.
 * Pure: the tenant's gate keeps the state.
 */

export const FAILURES_TO_OPEN = 5;
/** 3 of 5: the failures that open a breaker come from two callers at least, the second failing twice (or from three). */
export const FAILURES_PER_CALLER = 3;
export const FAILURE_WINDOW_MS = 10 * 60_000;
export const BASE_COOLDOWN_MS = 30_000;
export const MAX_COOLDOWN_MS = 30 * 60_000;
export const PROBE_LEASE_MS = 60_000;
/** How long an outage may hold runs: past it, a run the breaker would hold ends dead instead. */
export const MAX_HOLD_MS = 24 * 60 * 60_000;
/** The callers remembered for the round of probes: more than this on one origin share the oldest places. */
const MAX_TRACKED = 16;
/**
 * After a cooldown, how long the probe is kept for the caller whose turn it is (held, and
 * probed least recently), should another's run come first: its runs were held until the same
 * instant, so they come within moments; one that never comes (its job deleted) costs this once.
 */
export const PROBE_TURN_MS = 10_000;

export type BreakerPosition = "closed" | "open" | "half_open";

export interface Breaker {
  origin: string;
  state: BreakerPosition;
  /** Failures in a row, the first of them at `firstFailureAt`. */
  failures: number;
  firstFailureAt: number | null;
  /** The failures in a row by caller: at most `FAILURES_TO_OPEN` callers, since each adds one to what opens it. */
  callers: Record<string, number>;
  openedAt: number | null;
  /** When it first opened in this outage: a failed probe opening it again keeps it; closing clears it. */
  downSince: number | null;
  /** Open: when a probe may go. Half-open: when the probe out counts as lost. */
  retryAt: number | null;
  cooldownMs: number;
  /** Runs held since the breaker last opened. */
  held: number;
  /** The callers that probed in this outage, the most recent last. */
  probers: string[];
  /** The callers held in this outage, the most recent last: whose turn to probe may come. */
  heldCallers: string[];
}

export const closedBreaker = (origin: string): Breaker => ({
  origin,
  state: "closed",
  failures: 0,
  firstFailureAt: null,
  callers: {},
  openedAt: null,
  downSince: null,
  retryAt: null,
  cooldownMs: BASE_COOLDOWN_MS,
  held: 0,
  probers: [],
  heldCallers: [],
});

/** A breaker as stored, from whichever release wrote it: what it lacks is as a closed one has it. */
export function storedBreaker(origin: string, json: string): Breaker {
  const stored = JSON.parse(json) as Partial<Breaker>;
  return { ...closedBreaker(origin), ...stored, downSince: stored.downSince ?? stored.openedAt ?? null };
}

/**
 * What an attempt's outcome says of its origin: false, that it is down rather than one endpoint
 * broken: no answer at all (connection refused or reset, DNS, TLS, a timeout), a gateway's
 * 502/503/504, a 429 (an origin throttles a tenant's key, not a path), a proxy's 520–526/530
 * (Cloudflare's "origin unreachable" answers). True, that it is up: any other answer below 500
 * (a 404 is an answer of a working origin). Null, nothing: a 500 or another 5xx (the endpoint's
 * own error: one broken handler answers it on a healthy host), a 408, a request refused before it
 * was sent (the SSRF guard, keys missing).
 */
export function originHealth(status: number | null, refused: boolean): boolean | null {
  if (refused) return null;
  if (status === null) return false;
  if (status === 429 || status === 502 || status === 503 || status === 504 || (status >= 520 && status <= 526) || status === 530)
    return false;
  return status < 500 && status !== 408 ? true : null;
}

/**
 * Who made a call, for a breaker: the job (a run id names its job: src/model/ids.ts), and the
 * step for a workflow's step, since each step is an endpoint of its own.
 */
export function callerOf(runId: string): string {
  const m = /^run_([0-9A-Za-z]+)_[^.]*(?:\.(.+))?$/.exec(runId);
  if (!m) return runId;
  return m[2] === undefined ? m[1]! : `${m[1]}.${m[2]}`;
}

export interface BreakerVerdict {
  breaker: Breaker;
  /** The indices of the runs that may call now, among those asked about. */
  pass: number[];
  /** Until when the others wait (null: none waits). */
  waitUntil: number | null;
  /** The origin has been down past `MAX_HOLD_MS`: the runs that do not pass end dead rather than wait. */
  giveUp: boolean;
  /** When this outage began (the breaker first opened), for what a held run says. */
  downSince: number | null;
}

/**
 * Runs of these `callers` (one entry a run) want to call the origin now: which may, and until
 * when the others wait. The breaker as it is after the check comes back too (a probe granted
 * moves it). A probe goes to the run whose caller probed least recently (never: first).
 */
export function check(b: Breaker, callers: readonly string[], now: number): BreakerVerdict {
  const runs = callers.length;
  if (b.state === "closed" || runs === 0)
    return { breaker: b, pass: callers.map((_, i) => i), waitUntil: null, giveUp: false, downSince: null };
  const giveUp = b.downSince !== null && now - b.downSince > MAX_HOLD_MS;
  const hold = (until: number): BreakerVerdict => {
    const heldCallers = remember(b.heldCallers, callers);
    return { breaker: { ...b, held: b.held + runs, heldCallers }, pass: [], waitUntil: until, giveUp, downSince: b.downSince };
  };
  if (b.retryAt !== null && now < b.retryAt) return hold(b.retryAt);
  // Open and cooled down, or half-open with its probe lost: one run goes, as the probe, that of
  // the caller that probed least recently; a held caller whose turn it is more gets a moment to come.
  const probe = leastRecent(b.probers, callers);
  const caller = callers[probe]!;
  const turn = leastRecent(b.probers, [...b.heldCallers, ...callers]);
  const whoseTurn = [...b.heldCallers, ...callers][turn]!;
  if (rank(b.probers, whoseTurn) < rank(b.probers, caller) && b.retryAt !== null && now < b.retryAt + PROBE_TURN_MS)
    return hold(b.retryAt + PROBE_TURN_MS);
  const probers = remember(b.probers, [caller]);
  const breaker: Breaker = { ...b, state: "half_open", retryAt: now + PROBE_LEASE_MS, held: b.held + runs - 1, probers };
  return { breaker, pass: [probe], waitUntil: runs > 1 ? breaker.retryAt : null, giveUp, downSince: b.downSince };
}

/** Where a caller stands in the round of probes: -1 never probed, then by when it last did. */
const rank = (probers: readonly string[], caller: string) => probers.indexOf(caller);

/** The index of the caller that probed least recently: one never seen probing first, then the earliest, ties to the first. */
function leastRecent(probers: readonly string[], callers: readonly string[]): number {
  let best = 0;
  callers.forEach((caller, i) => {
    if (rank(probers, caller) < rank(probers, callers[best]!)) best = i;
  });
  return best;
}

/** `list` with `callers` moved to its end (most recent), at most MAX_TRACKED kept. */
function remember(list: readonly string[], callers: readonly string[]): string[] {
  const fresh = new Set(callers);
  return [...list.filter((c) => !fresh.has(c)), ...fresh].slice(-MAX_TRACKED);
}

/**
 * An attempt's outcome against the origin, by `caller`: `ok` true (the origin is up), false
 * (it is down), null (neither: an endpoint's own error), as `originHealth` says.
 */
export function record(b: Breaker, ok: boolean | null, now: number, caller: string): Breaker {
  if (ok === null) return b;
  if (ok) return b.state === "closed" && b.failures === 0 ? b : closedBreaker(b.origin);
  if (b.state === "half_open") {
    const cooldownMs = Math.min(b.cooldownMs * 2, MAX_COOLDOWN_MS);
    return { ...b, state: "open", openedAt: now, retryAt: now + cooldownMs, cooldownMs };
  }
  if (b.state === "open") return b; // a run started before it opened: it is open already
  const fresh = b.firstFailureAt === null || now - b.firstFailureAt > FAILURE_WINDOW_MS;
  const failures = fresh ? 1 : b.failures + 1;
  const firstFailureAt = fresh ? now : b.firstFailureAt;
  const before = fresh ? {} : b.callers;
  // Past its share a caller's failures are not kept: they could not open it, and the map stays small.
  const callers = (before[caller] ?? 0) >= FAILURES_PER_CALLER ? before : { ...before, [caller]: (before[caller] ?? 0) + 1 };
  const counted = Object.values(callers).reduce((sum, n) => sum + n, 0);
  if (counted < FAILURES_TO_OPEN) return { ...b, failures, firstFailureAt, callers };
  return {
    ...b,
    state: "open",
    failures,
    firstFailureAt,
    callers,
    openedAt: now,
    downSince: now,
    retryAt: now + b.cooldownMs,
    held: 0,
    probers: [],
    heldCallers: [],
  };
}

/**
 * The breaker a run's dispatch names: its tenant's, for the origin of what the run calls (the
 * job's target, or a workflow step's); none if the job opted out or the run calls nothing.
 */
export function breakerKey(
  job: { tenantId: string; spec: Pick<JobSpec, "breaker"> } | null,
  target: StoredTarget | null,
): BreakerKey | Record<string, never> {
  if (!job || !target || job.spec.breaker === false) return {};
  const origin = originOf(target);
  // An URL the API accepted always has one; nothing to key a breaker on otherwise.
  return origin === "null" ? {} : { tenantId: job.tenantId, origin };
}
