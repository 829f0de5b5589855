import { type Answer, MAX_BACKFILL, type Refusal } from "../protocol/shard-rpc";
import { ApiError, notFound } from "./errors";

/** What was asked of the shard, and of which job (trigger, backfill) or run (the rest). */
export interface ShardCall {
  call: "trigger" | "backfill" | "retry" | "complete" | "heartbeat";
  id: string;
}

const invalidToken = () => new ApiError(403, "invalid_token", "this completion token does not belong to this run");

/**
 * Every shard refusal as the API answers it. The switch is exhaustive, so a refusal added to
 * the contract does not compile until it has an answer here.
 */
export function refusalError(refusal: Refusal, asked: ShardCall): ApiError {
  switch (refusal) {
    case "unknown_job":
      return notFound("job", asked.id);
    case "job_paused":
      return new ApiError(409, "job_paused", `the job is paused: resume it to ${asked.call === "backfill" ? "backfill" : "run it"}`);
    case "too_many":
      return new ApiError(400, "invalid_request", `to: the range holds more than ${MAX_BACKFILL} fires; split it`);
    case "not_retryable":
      return new ApiError(409, "not_retryable", "only a dead or failed run of a live (not paused, not deleted) job can be retried");
    case "unknown_run":
      // complete and heartbeat take a completion token, no API key: answering an unknown run
      // differently from a wrong token would tell anyone which runs exist.
      return asked.call === "retry" ? notFound("run", asked.id) : invalidToken();
    case "invalid_token":
      return invalidToken();
    case "stale":
      return new ApiError(409, "stale", "this attempt is no longer current (it timed out, or the run ended); nothing was changed");
  }
}

/** The value of an answer, or the refusal as an ApiError. */
export function answered<T, R extends Refusal>(answer: Answer<T, R>, asked: ShardCall): T {
  if (answer.ok) return answer.value;
  throw refusalError(answer.refusal, asked);
}
