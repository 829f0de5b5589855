/**
 * What the API stores for a field a job leaves out (src/model/job.ts). Apply needs them to see
 * that a field removed from the file must go back to its default. test/node-tools/apply-plan.test.ts
 * checks each against the `default` the OpenAPI document gives, so they cannot drift apart.
 */
export const SERVER_DEFAULTS = {
  method: "POST",
  retry: { maxAttempts: 3, backoff: { initialMs: 1_000, maxMs: 300_000, factor: 2 }, jitter: "full" },
  timeoutMs: 30_000,
  overlap: "allow",
  misfire: "fire_once",
  catchupWindow: "1h",
} as const;
