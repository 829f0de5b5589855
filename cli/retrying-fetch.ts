/**
 * The CLI's fetch: a request the API answered 503 (its catalog briefly unavailable) or 429 (a
 * rate or sign-in limit) is sent again after the `Retry-After` it gave, a few times, when sending
 * it again cannot do anything twice: reads, and the calls edgecron makes idempotent (a PUT or
 * DELETE, a pause or resume, a backfill, whose runs' ids are derived). A create is not retried:
 * the caller decides, with an Idempotency-Key of its own.
 */

const TRIES = 4;
/** The longest wait honoured; a longer Retry-After ends the retries. */
const MAX_WAIT_MS = 10_000;
const RETRIED_STATUSES = new Set([429, 503]);
const IDEMPOTENT_POSTS = /\/(backfill|pause|resume)$/;

export function retryingFetch(send: (request: Request) => Promise<Response> = fetch): (request: Request) => Promise<Response> {
  return async (request) => {
    const again = isSafeToRepeat(request);
    for (let tries = 1; ; tries++) {
      const response = await send(again ? request.clone() : request);
      if (!again || tries >= TRIES || !RETRIED_STATUSES.has(response.status)) return response;
      const waitMs = retryAfterMs(response.headers.get("retry-after"));
      if (waitMs === null || waitMs > MAX_WAIT_MS) return response;
      await response.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, waitMs));
    }
  };
}

function isSafeToRepeat(request: Request): boolean {
  if (["GET", "HEAD", "PUT", "DELETE"].includes(request.method)) return true;
  return request.method === "POST" && IDEMPOTENT_POSTS.test(new URL(request.url).pathname);
}

/** Seconds, as the API sends them (no HTTP-date); null when absent or unreadable. */
function retryAfterMs(header: string | null): number | null {
  const seconds = header === null ? Number.NaN : Number(header);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1_000 : null;
}
