/**
 * The job fields apply compares and sends (POST /v1/jobs's, but `name`, which matches a declared
 * job to the tenant's, and `paused`, which apply manages apart). A field the API gains goes here.
 */
export const JOB_FIELDS = [
  "schedule",
  "target",
  "steps",
  "retry",
  "timeoutMs",
  "overlap",
  "misfire",
  "catchupWindow",
  "jitter",
  "maxConcurrency",
  "ratePerSecond",
  "flowControl",
  "retention",
  "pauseAfterFailures",
  "notify",
  "breaker",
] as const;

/** The fields by which a file chains a job to others (onSuccess/onFailure): by their names, where the API takes ids (chains.ts). */
export const CHAIN_FIELDS = ["onSuccess", "onFailure"] as const;
export type ChainField = (typeof CHAIN_FIELDS)[number];
