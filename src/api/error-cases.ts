import { MAX_BACKFILL } from "../protocol/shard-rpc";
import { MAX_BODY_BYTES } from "./auth";
import { ApiError, invalidField, notFound } from "./errors";
import { refusalError } from "./refusals";

/**
 * The ways a route can fail, as the API reference (/docs) shows them: each with when it
 * happens and the body it answers, which becomes the response's example. The bodies come from
 * the factories the handlers throw with where there is one, so the examples say what the API
 * says; the others repeat the message of the one place that throws it.
 */
export interface ErrorCase {
  /** The example's name; distinct among the cases of one status on one route. */
  name: string;
  when: string;
  error: ApiError;
}

const errorCase = (when: string, error: ApiError, name = error.code): ErrorCase => ({ name, when, error });

const JOB = "job_0mihx2k3f8a1b2c3d4e5";
const RUN = "run_0mihx2k3f8a1b2c3d4e5_mj3k2a00";

/** 400 for one field; `issues` lists every field that failed, as this one does. */
export const invalid = (path: string, message: string) =>
  errorCase(
    "a parameter or the body failed validation: `issues` names each field and why",
    invalidField(path, message),
    `invalid_${path.replace(/[^\w.-]/g, "")}`,
  );

/** A page's cursor that no answer of this API gave (src/app/pagination.ts). */
export const badCursor = errorCase(
  "`cursor` is not one this API returned",
  new ApiError(400, "invalid_request", "cursor: not a cursor this API returned"),
  "bad_cursor",
);

/** A path id longer than any id: refused by validation before anything is read. */
export const idTooLong = (max: number) => invalid("id", `Too big: expected string to have <=${max} characters`);

// ---- every route behind an API key (the /v1 routes but the completion-token ones, and /metrics) ----

const unauthorized = errorCase(
  "no `Authorization: Bearer` header, or neither a live API key nor the admin token in it",
  new ApiError(401, "unauthorized", "send Authorization: Bearer <API key or admin token>", {
    "WWW-Authenticate": 'Bearer realm="edgecron"',
  }),
);

const rateLimited = errorCase(
  "a tenant key over its tenant's `requestsPerSecond`; retry after `Retry-After` seconds (the admin token is never limited)",
  new ApiError(429, "rate_limited", "this tenant may make 100 requests per second; retry after the Retry-After seconds", {
    "Retry-After": "1",
  }),
);

/** Answered by errors.ts for a CatalogUnavailable; the key lookup of a tenant's request reads D1 too. */
const catalogUnavailable = errorCase(
  "the job catalog (D1) could not answer; scheduled runs go on; retry after `Retry-After` seconds",
  new ApiError(503, "catalog_unavailable", "the job catalog (D1) is unavailable; scheduled runs go on; retry this request", {
    "Retry-After": "5",
  }),
);

const signInThrottled = errorCase(
  "too many failed sign-ins from this client address or for this key prefix; retry after `Retry-After` seconds",
  new ApiError(
    429,
    "sign_in_throttled",
    "too many failed sign-ins from this client or for this key prefix; retry after the Retry-After seconds",
    {
      "Retry-After": "3",
    },
  ),
);

/** A key without the scope the route needs (src/api/route-scopes.ts), or limited to a job prefix on a route about the whole tenant. */
const insufficientScope = errorCase(
  "the key lacks the scope this route needs (`read`, `write` or `admin`), or is limited to a prefix of job names and the route concerns the whole tenant",
  new ApiError(403, "insufficient_scope", 'this route needs the "write" scope; this key has read', {
    "WWW-Authenticate": 'Bearer realm="edgecron", error="insufficient_scope", scope="write"',
  }),
);

export const AUTHENTICATED = [unauthorized, insufficientScope, rateLimited, signInThrottled, catalogUnavailable];

// ---- every route that takes a JSON body ----

/** The cases of a JSON body of at most `maxBytes`. */
export const jsonBodyCases = (maxBytes: number) => [
  errorCase("the body is not JSON", new ApiError(400, "bad_request", "Malformed JSON in request body")),
  errorCase(
    `the body is larger than ${maxBytes} bytes`,
    new ApiError(413, "payload_too_large", `the request body may be at most ${maxBytes} bytes`),
  ),
  errorCase(
    "the body was sent with another Content-Type than application/json",
    new ApiError(415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json"),
  ),
];

export const JSON_BODY = jsonBodyCases(MAX_BODY_BYTES);

// ---- what particular routes answer ----

export const jobNotFound = errorCase("no job with this id, or another tenant's", notFound("job", JOB), "job_not_found");
export const runNotFound = errorCase("no run with this id, or one of another tenant's job", notFound("run", RUN), "run_not_found");
export const tenantNotFound = errorCase(
  "no tenant with this id, or (for a tenant key) another tenant",
  notFound("tenant", "ten_0123456789abcdefghij"),
  "tenant_not_found",
);
export const keyNotFound = errorCase("the tenant has no key with this id", notFound("key", "key_0123456789abcdefghij"), "key_not_found");

export const adminOnly = errorCase(
  "a tenant key asked for what only the admin token may do",
  new ApiError(403, "forbidden", "only the admin token may do this"),
);

export const quotaExceeded = errorCase(
  "the tenant already has its `maxJobs` live jobs (not deleted, with an instant of their schedule to come)",
  new ApiError(
    403,
    "quota_exceeded",
    "this tenant may have at most 10000 live jobs (not deleted, with an instant of their schedule to come); delete one first",
  ),
);

export const preconditionFailed = errorCase(
  "`If-Match` names none of the job's current ETag: it changed since the client read it; nothing was changed",
  new ApiError(412, "precondition_failed", 'the job changed since that ETag: it is at version 3 (ETag "v3"); read it again and retry', {
    ETag: '"v3"',
  }),
);

export const patchConflict = errorCase(
  "the job kept changing while the patch was applied to it; nothing was changed, repeating is safe",
  new ApiError(409, "conflict", "the job kept changing while this change was applied (10 times); repeat the request"),
);

export const shardUnavailable = errorCase(
  "the change is saved but the job's shard has not confirmed it yet; repeating the request is safe",
  new ApiError(503, "shard_unavailable", "the change is saved but its shard has not confirmed it yet; repeat the request", {
    "Retry-After": "1",
  }),
);

const asked = (call: "trigger" | "backfill" | "retry" | "complete", id: string) => ({ call, id });

export const jobPaused = (call: "trigger" | "backfill") =>
  errorCase("the job is paused: resume it first", refusalError("job_paused", asked(call, JOB)));

export const tooManyFires = errorCase(
  `the range holds more than ${MAX_BACKFILL} fires`,
  refusalError("too_many", asked("backfill", JOB)),
  "too_many_fires",
);

export const notRetryable = errorCase(
  "the run is not dead or failed, or its job is paused or deleted",
  refusalError("not_retryable", asked("retry", RUN)),
);

/** complete and heartbeat: an unknown run is answered like a wrong token, so ids cannot be probed. */
export const invalidToken = errorCase(
  "the token is not one edgecron issued, or not this run's",
  refusalError("invalid_token", asked("complete", RUN)),
);

export const staleAttempt = errorCase(
  "the attempt is no longer current (it timed out, or the run ended); nothing was changed",
  refusalError("stale", asked("complete", RUN)),
);

export const lastKey = errorCase(
  "a tenant key tried to revoke its tenant's last live key, or a key whose revocation takes the last ones with it (the keys it made); nothing was revoked",
  new ApiError(409, "last_key", "this is the tenant's last live key: add another before revoking it"),
);

export const keyLineConflict = errorCase(
  "keys made by the key kept being minted or revoked while it was revoked; nothing was revoked, repeating is safe",
  new ApiError(
    409,
    "conflict",
    "the keys this key made kept changing while it was revoked (10 times); nothing was revoked, repeat the request",
  ),
);

export const noArchive = errorCase(
  "this deployment has no archive bucket (R2): expired history was deleted",
  new ApiError(404, "no_archive", "this deployment has no archive bucket: expired history was deleted, not archived"),
);
