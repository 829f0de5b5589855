import type { ClaimResult, Outcome } from "../shard/shard";

type Claimed = Extract<ClaimResult, { result: "claimed" }>;

/** Longest error text kept on a run; a target's error page can be megabytes. */
const MAX_ERROR_CHARS = 500;

/**
 * The headers every attempt carries. Idempotency-Key is the same on every attempt of a run;
 * the completion token lets a target that answers 202 finish the attempt later.
 */
export function edgecronHeaders(claim: Claimed, publicUrl?: string): Record<string, string> {
  return {
    "Idempotency-Key": claim.runId,
    "X-Edgecron-Run-Id": claim.runId,
    "X-Edgecron-Job-Id": claim.jobId,
    "X-Edgecron-Attempt": String(claim.attempt),
    "X-Edgecron-Scheduled-At": new Date(claim.scheduledAt).toISOString(),
    "X-Edgecron-Completion-Token": claim.completionToken,
    ...(publicUrl && { "X-Edgecron-Complete-Url": `${publicUrl.replace(/\/$/, "")}/v1/runs/${claim.runId}/complete` }),
  };
}

/** Calls a run's target once, within its timeout, and describes what happened. Never throws. */
export async function executeTarget(claim: Claimed, publicUrl?: string): Promise<Outcome> {
  const { target } = claim;
  const headers = new Headers(target.headers);
  let body: string | undefined;
  if (typeof target.body === "string") body = target.body;
  else if (target.body !== undefined) {
    body = JSON.stringify(target.body);
    if (!headers.has("content-type")) headers.set("content-type", "application/json");
  }
  for (const [name, value] of Object.entries(edgecronHeaders(claim, publicUrl))) headers.set(name, value);

  const base = { runId: claim.runId, fence: claim.fence };
  try {
    const response = await fetch(target.url, {
      method: target.method,
      headers,
      body,
      signal: AbortSignal.timeout(claim.timeoutMs),
    });
    const ok = response.status >= 200 && response.status < 300;
    const text = ok ? (await response.body?.cancel(), "") : await response.text();
    return {
      ...base,
      ok,
      accepted: response.status === 202,
      status: response.status,
      error: ok ? null : `HTTP ${response.status}${text ? `: ${text.slice(0, MAX_ERROR_CHARS)}` : ""}`,
      retryAfterMs: parseRetryAfter(response.headers.get("retry-after"), Date.now()),
    };
  } catch (err) {
    const error = err as Error;
    const timedOut = error.name === "TimeoutError" || error.name === "AbortError";
    return {
      ...base,
      ok: false,
      status: null,
      error: timedOut ? `timed out after ${claim.timeoutMs} ms` : `request failed: ${error.message}`.slice(0, MAX_ERROR_CHARS),
    };
  }
}

/** Retry-After as seconds or an HTTP date, in ms from now; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}
