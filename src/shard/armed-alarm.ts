/**
 * Alarm lag's starting point (alarm-lag.ts says what lag is and how it is counted): what this
 * object knows of the alarm it set. An alarm set for a time already past (work
 * already due) is not late for the time before it was set. The runtime's `scheduledTime` says
 * so already on workerd (for such an alarm it is the time of the `setAlarm`, measured), but
 * the object keeps it too: a runtime that handed back the time asked for, or none, is read the
 * same way.
 */
export class ArmedAlarm {
  private at: number | null = null;
  private from = 0;

  /** The alarm is now set for `at` (null: none); unchanged, it keeps the moment it was first set. */
  set(at: number | null, now: number): void {
    if (at === this.at) return;
    this.at = at;
    this.from = at === null ? 0 : Math.max(at, now);
  }

  /**
   * The lag of an alarm starting `now`, or null when unknown. `scheduledTime` is the runtime's
   * (absent when the test harness calls `alarm()` itself); without it, the time this object
   * set, if it has come. A running alarm is no longer set (its `getAlarm()` is null).
   */
  started(now: number, scheduledTime: number | undefined): number | null {
    const known = this.at !== null && (scheduledTime === undefined || scheduledTime === this.at) ? this.from : null;
    this.set(null, now);
    const from = known ?? scheduledTime ?? null;
    return from === null || from > now ? null : now - from;
  }
}
