import type { GroupLimits } from "../model/flow-control";

/**
 * Which asked permits a tenant's gate grants, decided in one place for both kinds it counts: the
 * tenant's runs in flight (`maxRunsInFlight`) and each flow-control group's runs in flight
 * (`parallelism`) and starts per window (`rate` per `periodMs`, windows from the epoch). A run is
 * granted only when every limit it is under has room, in the order asked (oldest first). Pure:
 * the gate reads the counts, calls this, and writes what it says.
 */
export interface PermitAsk {
  permit: string;
  /** Under the tenant's runs-in-flight limit. */
  tenant: boolean;
  /** The group it belongs to, with the limits its job states. */
  group?: { key: string } & GroupLimits;
}

export interface GroupState {
  inFlight: number;
  windowStart: number;
  started: number;
  /** When the rate window under way ends, once a grant decided it: past it the row says nothing (windows restart at 0). */
  windowEnd?: number;
  /** Limits set for the group itself (a QStash queue's parallelism): they win over the job's. */
  override: GroupLimits | null;
}

export interface GrantDecision {
  granted: string[];
  /** Renewed rather than taken: held already (a repeated ask). */
  renewed: string[];
  tenantRefused: number;
  /** Per group, how many it refused for its parallelism (the shard waits to be woken). */
  groupRefused: Map<string, number>;
  /** Per group whose rate window is full: when the next window opens. */
  retryAt: Map<string, number>;
  /** Per group granted anything: its state after. */
  groups: Map<string, GroupState>;
}

/** The limits a group's run is held to: the group's own when set, else its job's. */
export function effectiveLimits(asked: GroupLimits, override: GroupLimits | null): GroupLimits {
  return override ?? asked;
}

export function windowOf(now: number, periodMs: number): number {
  return Math.floor(now / periodMs) * periodMs;
}

export function decideGrants(
  asks: readonly PermitAsk[],
  held: ReadonlySet<string>,
  tenantFree: number,
  groupsBefore: ReadonlyMap<string, GroupState>,
  now: number,
): GrantDecision {
  const d: GrantDecision = { granted: [], renewed: [], tenantRefused: 0, groupRefused: new Map(), retryAt: new Map(), groups: new Map() };
  const state = (key: string) => {
    let g = d.groups.get(key);
    if (!g) {
      g = { ...(groupsBefore.get(key) ?? { inFlight: 0, windowStart: 0, started: 0, override: null }) };
      d.groups.set(key, g);
    }
    return g;
  };
  let free = tenantFree;
  for (const ask of asks) {
    if (held.has(ask.permit)) {
      d.renewed.push(ask.permit);
      d.granted.push(ask.permit);
      continue;
    }
    const g = ask.group ? state(ask.group.key) : null;
    const limits = g && ask.group ? effectiveLimits(ask.group, g.override) : null;
    if (g && limits) {
      if (limits.rate !== undefined) {
        const period = limits.periodMs ?? 1_000;
        const start = windowOf(now, period);
        if (g.windowStart !== start) {
          g.windowStart = start;
          g.started = 0;
        }
        g.windowEnd = start + period;
        if (g.started >= limits.rate) {
          d.retryAt.set(ask.group!.key, start + period);
          continue;
        }
      }
      if (limits.parallelism !== undefined && g.inFlight >= limits.parallelism) {
        d.groupRefused.set(ask.group!.key, (d.groupRefused.get(ask.group!.key) ?? 0) + 1);
        continue;
      }
    }
    if (ask.tenant && free <= 0) {
      d.tenantRefused++;
      continue;
    }
    if (ask.tenant) free--;
    if (g && limits) {
      g.inFlight++;
      if (limits.rate !== undefined) {
        g.started++;
        if (g.started >= limits.rate) d.retryAt.set(ask.group!.key, g.windowStart + (limits.periodMs ?? 1_000));
      }
    }
    d.granted.push(ask.permit);
  }
  return d;
}
