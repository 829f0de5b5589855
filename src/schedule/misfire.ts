import { nextFireAfter, type Schedule } from "./next-fire";

export const MISFIRE_POLICIES = ["skip", "fire_once", "catch_up"] as const;
export type MisfirePolicy = (typeof MISFIRE_POLICIES)[number];

/** A fire handled within this long of its instant is on time; later, it was missed. */
export const MISFIRE_GRACE_MS = 60_000;
/** catch_up never makes more runs than this in one go, whatever the window. */
export const CATCH_UP_CAP = 100;
/** How many past fires are walked before the rest are passed over (an every-1s job down for days). */
const SCAN_LIMIT = 10_000;

export interface DueFire {
  at: number;
  /** The fire was missed (paused, or the shard could not run) and this run catches it up. */
  catchUp: boolean;
}

/**
 * Which of a job's fires from `nextFire` up to `now` become runs, and the next fire after them.
 * On-time fires always run. Missed ones follow the policy: `skip` drops them, `fire_once`
 * runs the most recent one, `catch_up` runs each one inside `windowMs`, at most CATCH_UP_CAP.
 * One-off (`at`) jobs always run their one fire, however late.
 */
export function planDueFires(
  schedule: Schedule,
  anchorMs: number,
  nextFire: number,
  now: number,
  policy: MisfirePolicy,
  windowMs: number,
): { fires: DueFire[]; next: number | null } {
  const due: number[] = [];
  let t: number | null = nextFire;
  while (t !== null && t <= now && due.length < SCAN_LIMIT) {
    due.push(t);
    t = nextFireAfter(schedule, anchorMs, t);
  }
  if (t !== null && t <= now) t = nextFireAfter(schedule, anchorMs, now);
  if (schedule.at !== undefined) return { fires: due.map((at) => ({ at, catchUp: now - at > MISFIRE_GRACE_MS })), next: t };

  const missed = due.filter((at) => now - at > MISFIRE_GRACE_MS);
  const onTime = due.filter((at) => now - at <= MISFIRE_GRACE_MS).map((at) => ({ at, catchUp: false }));
  let caught: number[] = [];
  if (policy === "fire_once") caught = missed.slice(-1);
  else if (policy === "catch_up") caught = missed.filter((at) => now - at <= windowMs).slice(-CATCH_UP_CAP);
  return { fires: [...caught.map((at) => ({ at, catchUp: true })), ...onTime], next: t };
}
