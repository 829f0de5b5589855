import { config } from "../config";
import { parseRetryAfter } from "../model/retry-after";
import type { Outcome, RunOrder } from "../protocol/queue-messages";
import type { DeliveredAnswer } from "../qstash/callback-body";
import { qstashOutcome, upstashHeaders } from "../qstash/delivery";
import { UPSTASH_SIGNATURE, upstashSignature } from "../qstash/signature";
import { signCompletionToken } from "../security/completion-tokens";
import { redactUrl } from "../security/redact";
import { REQUEST_SIGNATURE_HEADER, requestSignature } from "../security/request-signature";
import { SIGNATURE_HEADER, signatureHeader, signingSecrets } from "../security/signing";
import { policyOf, type TargetPolicy, targetRefusal } from "../security/target-guard";
import { headerNamesOf, openTarget } from "../security/targets";
import { MAX_RESULT_BYTES } from "../workflow/steps";
import { discardBody, readAtMost, readPrefix } from "./bodies";
import type { Slots } from "./connections";
import { type SentRequest, sendQstashCallback } from "./qstash-callbacks";

/** Longest error text kept on a run; a target's error page can be megabytes. */
const MAX_ERROR_CHARS = 500;
/** Redirects followed by hand, each checked by the SSRF guard (fetch would follow them unchecked). */
const MAX_REDIRECTS = 5;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);
/** Most of a QStash destination's answer its callback is sent (QStash's own callbacks carry the body whole). */
const MAX_CALLBACK_BODY_BYTES = 256 * 1024;
/** Each names, or stands for, the one URL the user named: sent there only (see `send`). */
const SIGNATURES = [SIGNATURE_HEADER, REQUEST_SIGNATURE_HEADER, UPSTASH_SIGNATURE];
/** Credentials: they stay with the origin the user named (see `send`). */
const CROSS_ORIGIN_DROPPED = ["X-Edgecron-Completion-Token", "X-Edgecron-Complete-Url"];

/** What executing needs from the Worker's environment, read once per batch. */
export interface ExecuteContext {
  publicUrl?: string;
  encryptionKeys: string;
  signingSecret: string;
  policy: TargetPolicy;
  /** A QStash message's callbacks, published after its attempt (src/consumer/qstash-callbacks.ts). */
  qstashCallback?: (order: RunOrder, outcome: Outcome, sent: SentRequest, answer: DeliveredAnswer) => Promise<void>;
}

export function executeContext(env: Env): ExecuteContext {
  const settings = config(env);
  const { publicUrl } = settings;
  return {
    publicUrl,
    encryptionKeys: env.ENCRYPTION_KEYS,
    signingSecret: env.SIGNING_SECRET,
    policy: policyOf(settings),
    qstashCallback: (order, outcome, sent, answer) => sendQstashCallback(env, order, outcome, sent, answer),
  };
}

/**
 * The headers every attempt carries. Idempotency-Key is the same on every attempt of a run;
 * the completion token (the shard's, signed: src/security/completion-tokens.ts) lets a target
 * that answers 202 finish the attempt later.
 */
export function edgecronHeaders(order: RunOrder, completionToken: string, publicUrl?: string): Record<string, string> {
  return {
    // A workflow's step: the same key on every attempt of that step of that run (docs/workflows.md).
    "Idempotency-Key": order.step ? `${order.step.runId}:${order.step.stepId}` : order.runId,
    ...(order.step && { "X-Edgecron-Step": order.step.stepId }),
    "X-Edgecron-Run-Id": order.runId,
    "X-Edgecron-Job-Id": order.jobId,
    "X-Edgecron-Attempt": String(order.attempt),
    "X-Edgecron-Scheduled-At": new Date(order.scheduledAt).toISOString(),
    "X-Edgecron-Completion-Token": completionToken,
    ...(publicUrl && { "X-Edgecron-Complete-Url": `${publicUrl.replace(/\/$/, "")}/v1/runs/${order.runId}/complete` }),
  };
}

/**
 * Calls a run's target once, within its timeout, and describes what happened. Never throws.
 * The target's sealed URL, headers and body are opened only here, for the request; the request is
 * signed for the tenant; every hop (redirects included) must pass the SSRF guard.
 * The request waits for one of the invocation's connection slots, in its tenant's turn
 * (src/consumer/fair-slots.ts), and its timeout starts only once it has one: time spent behind
 * other targets is not the target's. Redirect hops reuse
 * the attempt's slot, as the platform counts one request waiting at a time.
 * With its slot, the request is sent only if `mayStart` (its attempt can still finish within its
 * lease: src/consumer/lease-keeper.ts); if not, nothing is sent and there is no outcome (null).
 */
export async function executeTarget(
  order: RunOrder,
  ctx: ExecuteContext,
  connections: Slots,
  mayStart: () => boolean = () => true,
): Promise<Outcome | null> {
  let request: PreparedRequest;
  try {
    request = await buildRequest(order, ctx);
  } catch (err) {
    // Keys missing or rotated away: nothing to send. Retryable, since fixing the keys helps.
    connections.forgo();
    if (!mayStart()) return null;
    return {
      runId: order.runId,
      fence: order.fence,
      ok: false,
      status: null,
      error: `could not prepare the request: ${(err as Error).message}`.slice(0, MAX_ERROR_CHARS),
    };
  }

  const outcome = await connections.hold(async () => (mayStart() ? send(order, ctx, request) : null));
  const meta = order.target.qstash;
  if (!meta || outcome === null) return outcome;
  const decided = qstashOutcome(outcome, meta, order.attempt, request.nonRetryable);
  if ((meta.callback || meta.failureCallback) && ctx.qstashCallback) {
    const answer = request.answer ?? { status: 0, headers: {}, body: outcome.error ?? "" };
    const sent = { url: request.url, method: order.target.method, headers: request.targetHeaders, body: request.body ?? "" };
    await ctx.qstashCallback(order, decided, sent, answer);
  }
  return decided;
}

async function send(order: RunOrder, ctx: ExecuteContext, request: PreparedRequest): Promise<Outcome> {
  // Its start as the target sees it: the attempt began at its dispatch, before the queue's wait.
  const base = { runId: order.runId, fence: order.fence, startedAt: Date.now() };
  const refused = (error: string): Outcome => ({ ...base, ok: false, status: null, error, kind: "permanent" });
  const { target } = order;
  const signal = AbortSignal.timeout(order.timeoutMs);
  let url = request.url;
  let method: string = target.method;
  const { headers } = request;
  let body = request.body;
  /** A hop has left the origin the user named: from then on its credentials are not sent, even back at that origin. */
  let crossed = false;
  try {
    for (let hop = 0; ; hop++) {
      const refusal = targetRefusal(url, ctx.policy);
      // A redirect's Location is the target's: its query or user info may hold a token, kept out of the run's error.
      if (refusal) return refused(hop === 0 ? `target refused: ${refusal}` : `redirect to ${redactUrl(url)} refused: ${refusal}`);
      if (hop === 0) await request.sign(method, body, url);
      const response = await fetch(url, { method, headers, body, signal, redirect: "manual" });
      const location = response.headers.get("location");
      if (REDIRECTS.has(response.status) && location !== null) {
        await response.body?.cancel();
        if (hop >= MAX_REDIRECTS) return refused(`more than ${MAX_REDIRECTS} redirects`);
        const next = new URL(location, url);
        // Signed once, for the URL the user named, never again for a URL a target chose: a
        // signature re-made at a hop would be edgecron's word for wherever the redirect points,
        // the tenant's other endpoints on that origin included.
        for (const name of SIGNATURES) headers.delete(name);
        // Credentials go to the origin the user named, no further: the job's own headers and the
        // completion token (it could finish the run). The body, sealed at rest, does not leave
        // that origin either: a redirect that would carry it elsewhere is not followed.
        if (!crossed && !sameOrigin(new URL(url), next)) {
          crossed = true;
          for (const name of [...headerNamesOf(target), ...CROSS_ORIGIN_DROPPED]) headers.delete(name);
        }
        if (response.status === 303 || ((response.status === 301 || response.status === 302) && method === "POST")) {
          method = "GET";
          body = undefined;
          headers.delete("content-type");
        }
        if (crossed && body !== undefined) {
          return refused(`redirect to ${redactUrl(next.href)} not followed: the request's body is not sent on to another origin`);
        }
        url = next.href;
        continue;
      }
      request.nonRetryable = response.headers.get("upstash-nonretryable-error")?.trim().toLowerCase() === "true";
      const meta = order.target.qstash;
      if (meta && (meta.callback || meta.failureCallback)) {
        // The answer, for the callback: read from a copy while the outcome is described from the original.
        const copy = response.clone();
        const [outcome, text] = await Promise.all([describe(base, response, false), readAtMost(copy, MAX_CALLBACK_BODY_BYTES)]);
        request.answer = { status: response.status, headers: Object.fromEntries(response.headers), body: text ?? "" };
        return outcome;
      }
      return await describe(base, response, order.step !== undefined);
    }
  } catch (err) {
    const error = err as Error;
    const timedOut = error.name === "TimeoutError" || error.name === "AbortError";
    return {
      ...base,
      ok: false,
      status: null,
      error: timedOut ? `timed out after ${order.timeoutMs} ms` : `request failed: ${error.message}`.slice(0, MAX_ERROR_CHARS),
    };
  }
}

type PreparedRequest = Awaited<ReturnType<typeof buildRequest>>;

async function buildRequest(order: RunOrder, ctx: ExecuteContext) {
  const secrets = await openTarget(ctx.encryptionKeys, order.target, order.jobId);
  const headers = new Headers(secrets.headers);
  let body: string | Uint8Array | undefined;
  if (secrets.bodyBase64 !== undefined) {
    body = Uint8Array.from(atob(secrets.bodyBase64), (c) => c.charCodeAt(0));
    if (!headers.has("content-type")) headers.set("content-type", "application/octet-stream");
  } else if (typeof secrets.body === "string") body = secrets.body;
  else if (secrets.body !== undefined || (order.input !== undefined && order.target.method !== "GET")) {
    // A workflow step without a body of its own is sent its parents' results (a GET sends none).
    body = secrets.body !== undefined ? JSON.stringify(secrets.body) : order.input;
    if (!headers.has("content-type")) headers.set("content-type", "application/json");
  }
  const completionToken = await signCompletionToken(ctx.signingSecret, order.completionToken);
  for (const [name, value] of Object.entries(edgecronHeaders(order, completionToken, ctx.publicUrl))) headers.set(name, value);
  const meta = order.target.qstash;
  if (meta) for (const [name, value] of Object.entries(upstashHeaders(meta, order))) headers.set(name, value);
  const { current, next } = await signingSecrets(ctx.signingSecret, order.tenantId, order.signingGeneration);
  const idempotencyKey = headers.get("Idempotency-Key") ?? order.runId;
  /** Signs the first request, the one to the URL the user named (a redirect hop is sent unsigned: `send`). */
  const sign = async (method: string, sent: string | Uint8Array | undefined, url: string) => {
    const now = Date.now();
    const signed = { method, url, body: sent, runId: order.runId, attempt: order.attempt, idempotencyKey };
    headers.set(REQUEST_SIGNATURE_HEADER, await requestSignature([current, next], signed, now));
    // The first scheme, while the tenant keeps it (docs/security.md#verify-signatures); it signs
    // text only, so a binary body carries V2 alone.
    if (order.legacySignature !== false && !(sent instanceof Uint8Array)) {
      headers.set(SIGNATURE_HEADER, await signatureHeader([current, next], order.runId, sent ?? "", now));
    }
    // QStash's JWT, signed with the current key as QStash signs; its Receiver tries the next key too.
    if (meta) headers.set(UPSTASH_SIGNATURE, await upstashSignature(current, url, sent, now));
  };
  return {
    /** Sealed at rest with the headers and body, opened here only: the URL may carry a token. */
    url: secrets.url,
    headers,
    body,
    sign,
    nonRetryable: false,
    targetHeaders: { ...secrets.headers },
    answer: undefined as DeliveredAnswer | undefined,
  };
}

async function describe(base: { runId: string; fence: number }, response: Response, keepResult: boolean): Promise<Outcome> {
  const ok = response.status >= 200 && response.status < 300;
  // A workflow step's success keeps its body: the steps below receive it (a 202's comes with its completion).
  if (ok && keepResult && response.status !== 202) {
    const result = await readAtMost(response, MAX_RESULT_BYTES);
    if (result === null) {
      const error = `the step's response body is larger than ${MAX_RESULT_BYTES / 1024} KiB, the most a step's result may be`;
      return { ...base, ok: false, status: response.status, error, kind: "permanent" };
    }
    return { ...base, ok, status: response.status, error: null, result };
  }
  if (ok) await discardBody(response);
  // A UTF-16 unit of text is at most 3 bytes of UTF-8, so this many bytes make the kept characters.
  const text = ok ? "" : await readPrefix(response, MAX_ERROR_CHARS * 3);
  return {
    ...base,
    ok,
    accepted: response.status === 202,
    status: response.status,
    error: ok ? null : `HTTP ${response.status}${text ? `: ${text.slice(0, MAX_ERROR_CHARS)}` : ""}`,
    retryAfterMs: parseRetryAfter(response.headers.get("retry-after"), Date.now()),
  };
}

/**
 * Whether a redirect stays with the origin the user named. An upgrade from http to https on the
 * same host and default ports counts as staying: it is the same server, reached more safely.
 */
export function sameOrigin(from: URL, to: URL): boolean {
  if (from.origin === to.origin) return true;
  return from.protocol === "http:" && to.protocol === "https:" && from.hostname === to.hostname && from.port === "" && to.port === "";
}
