import type { SignInRefusal } from "../gate/sign-in-throttle";
import { signInStub } from "../stubs";
import type { AppContext } from "./context";
import { ApiError } from "./errors";

/**
 * Failed sign-ins are limited per client address and per key prefix (src/gate/failure-budget.ts),
 * kept by a SignInThrottle object each. This isolate remembers who was throttled until when, so
 * a throttled client's next tries are refused here, before any D1 query or object call; another
 * isolate learns it at that client's next failure there.
 */

const refusedUntil = new Map<string, number>();
/** The memory's bound: a flood of distinct addresses must not grow it for ever. */
const MAX_REMEMBERED = 10_000;

/** What a request's failures are counted against: its client address (when known) and the key's prefix (when it is one). */
export function throttleNames(c: AppContext, keyPrefix: string | null): string[] {
  // Without CF-Connecting-IP (a call made inside the runtime, as tests make them) there is no
  // address to hold to account; every request through Cloudflare's edge has one.
  const address = c.req.header("CF-Connecting-IP");
  return [...(address ? [`address:${address}`] : []), ...(keyPrefix ? [`prefix:${keyPrefix}`] : [])];
}

const throttled = (retryAfterMs: number) =>
  new ApiError(
    429,
    "sign_in_throttled",
    "too many failed sign-ins from this client or for this key prefix; retry after the Retry-After seconds",
    {
      "Retry-After": String(Math.max(1, Math.ceil(retryAfterMs / 1000))),
    },
  );

/** Refuses (429) a client this isolate knows to be throttled; nothing is read to know it. */
export function refuseIfThrottled(c: AppContext, names: string[]): void {
  const now = Date.now();
  const until = Math.max(0, ...names.map((name) => refusedUntil.get(name) ?? 0));
  if (until > now) {
    count(c, "throttled");
    throw throttled(until - now);
  }
}

/**
 * Records a failed sign-in against every name; the error to answer: 401 while allowed, else 429.
 * A name whose next try must wait is remembered, so that try is refused before any lookup.
 */
export async function failedSignIn(c: AppContext, names: string[], invalid: ApiError): Promise<ApiError> {
  const answers = await Promise.all(names.map((name) => signInStub(c.env, name).fail()));
  if (refusedUntil.size >= MAX_REMEMBERED) refusedUntil.clear();
  const now = Date.now();
  for (const [i, name] of names.entries()) if (answers[i]!.blockedMs > 0) refusedUntil.set(name, now + answers[i]!.blockedMs);
  const wait = Math.max(0, ...answers.map((a) => a.refusedMs));
  if (wait === 0) {
    count(c, "invalid");
    return invalid;
  }
  count(c, "throttled");
  return throttled(wait);
}

/**
 * Counted after the answer, in one object (`totals`) for the whole deployment: so that a flood
 * does not become as many calls to it, an isolate sends what it counted in one call at a time,
 * the next carrying all that came meanwhile (a count can lag a call behind, or be lost with the
 * isolate; never counted twice).
 */
const pending: Record<SignInRefusal, number> = { invalid: 0, throttled: 0 };
let sending = false;

function count(c: AppContext, refusal: SignInRefusal): void {
  pending[refusal]++;
  if (sending) return;
  sending = true;
  const send = async (): Promise<void> => {
    try {
      while (pending.invalid + pending.throttled > 0) {
        const batch = { ...pending };
        pending.invalid = 0;
        pending.throttled = 0;
        await signInStub(c.env, "totals")
          .count(batch)
          .catch((err: unknown) => console.error("sign-in refusals not counted", (err as Error).message));
      }
    } finally {
      sending = false;
    }
  };
  const sent = send();
  try {
    c.executionCtx.waitUntil(sent);
  } catch {
    // No execution context (app.request in a test): the count still runs, unawaited.
  }
}
