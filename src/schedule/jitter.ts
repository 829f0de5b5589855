import { fnv1a32 } from "../model/ids";

/**
 * Deterministic jitter: a fire's offset in [0, windowMs) is a function of (job, instant), so a
 * thousand `0 0 * * *` jobs spread over the window instead of stampeding the same second, and
 * a re-run alarm or a sweep computes the same offset. The offsets need to be spread, not secret.
 */
export function jitterOffset(jobId: string, instantMs: number, windowMs: number): number {
  return windowMs <= 0 ? 0 : fnv1a32(`${jobId}@${instantMs}`) % windowMs;
}
