import { durationHeader } from "./duration";
import { QstashInputError } from "./errors";
import type { CallbackOptions } from "./meta";
import { checkRetryDelay } from "./retry-delay";

/**
 * The Upstash-* headers of a publish, an enqueue, a batch item or a schedule, read into what
 * edgecron needs, each checked: anything wrong is a 400 naming the header, before anything is
 * created. Headers this does not know (the SDK's Upstash-Telemetry-*, say) are ignored.
 */
export const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;
export type Method = (typeof METHODS)[number];

/** Edgecron's bounds: a target's timeout, a job's attempts (20, so 19 retries). */
export const MAX_RETRIES = 19;
export const DEFAULT_RETRIES = 3;
/**
 * The furthest a message may be due: QStash's own longest delay (a year, on its paid plans).
 * Upstash-Delay, a callback's -Delay and Upstash-Not-Before are each held to it, so a message
 * cannot sit in its shard, and in the tenant's `maxLiveMessages`, for longer.
 */
export const MAX_DELAY_DAYS = 365;
export const MAX_DELAY_MS = MAX_DELAY_DAYS * 86_400_000;

/** A delay header within [0, MAX_DELAY_MS], refused naming the bound in days. */
function delayHeader(name: string, text: string): number {
  const ms = durationHeader(name, text, 0, Number.MAX_SAFE_INTEGER);
  if (ms > MAX_DELAY_MS) throw new QstashInputError(name, `"${text}" is too long: a message may be delayed at most ${MAX_DELAY_DAYS}d`);
  return ms;
}

export interface FlowControl {
  key: string;
  parallelism?: number;
  rate?: number;
  periodMs?: number;
}

export interface MessageOptions {
  method: Method;
  /** When it is first delivered: Upstash-Not-Before, else now + Upstash-Delay. */
  notBeforeMs: number;
  delayMs: number;
  retries: number;
  retryDelay?: string;
  timeoutMs?: number;
  callback?: CallbackOptions;
  failureCallback?: CallbackOptions;
  deduplicationId?: string;
  contentBasedDeduplication: boolean;
  /** Upstash-Forward-* without the prefix, and Content-Type: what the destination is sent. */
  headers: Record<string, string>;
  label?: string;
  flowControl?: FlowControl;
  queueName?: string;
  cron?: string;
  scheduleId?: string;
}

type HeaderSource = { get(name: string): string | null; forEach(fn: (value: string, name: string) => void): void };

function integer(name: string, text: string, min: number, max: number): number {
  if (!/^\d{1,16}$/.test(text.trim())) throw new QstashInputError(name, `"${text}" is not a whole number`);
  const n = Number(text.trim());
  if (n < min || n > max) throw new QstashInputError(name, `must be between ${min} and ${max}`);
  return n;
}

function httpUrl(name: string, text: string): string {
  try {
    const url = new URL(text.trim());
    if (url.protocol === "http:" || url.protocol === "https:") return url.href;
  } catch {
    // below
  }
  throw new QstashInputError(name, `"${text}" is not an absolute http or https URL`);
}

function method(name: string, text: string): Method {
  const m = text.trim().toUpperCase();
  if (!(METHODS as readonly string[]).includes(m)) throw new QstashInputError(name, `"${text}" is not one of ${METHODS.join(", ")}`);
  return m as Method;
}

/** Headers under `prefix` (e.g. upstash-forward-), the prefix stripped. */
function forwarded(headers: HeaderSource, prefix: string): Record<string, string> {
  const out: Record<string, string> = {};
  headers.forEach((value, name) => {
    if (name.toLowerCase().startsWith(prefix)) out[name.slice(prefix.length)] = value;
  });
  return out;
}

/** Upstash-Flow-Control-Value: "parallelism=2, rate=10, period=1m", at least one of them. */
export function parseFlowControl(key: string | null, value: string | null): FlowControl | undefined {
  if (key === null && value === null) return undefined;
  if (key === null || key.trim() === "") throw new QstashInputError("Upstash-Flow-Control-Key", "required with Upstash-Flow-Control-Value");
  if (key.length > 200) throw new QstashInputError("Upstash-Flow-Control-Key", "must be at most 200 characters");
  if (value === null) throw new QstashInputError("Upstash-Flow-Control-Value", "required with Upstash-Flow-Control-Key");
  const out: FlowControl = { key: key.trim() };
  for (const part of value.split(",")) {
    const [name, raw, ...extra] = part.split("=").map((s) => s.trim());
    const bad = (why: string) => new QstashInputError("Upstash-Flow-Control-Value", `"${part.trim()}": ${why}`);
    if (!name || raw === undefined || extra.length > 0) throw bad("expected name=value");
    if (name === "parallelism") out.parallelism = integer("Upstash-Flow-Control-Value", raw, 1, 1_000);
    else if (name === "rate") out.rate = integer("Upstash-Flow-Control-Value", raw, 1, 1_000_000);
    else if (name === "period") out.periodMs = durationHeader("Upstash-Flow-Control-Value", raw, 1_000, 7 * 86_400_000);
    else throw bad("expected parallelism, rate or period");
  }
  if (out.parallelism === undefined && out.rate === undefined) {
    throw new QstashInputError("Upstash-Flow-Control-Value", "give parallelism or rate");
  }
  return out;
}

/** Upstash-Callback-* or Upstash-Failure-Callback-*: the callback and its own options. */
function callbackOf(headers: HeaderSource, header: string): CallbackOptions | undefined {
  const url = headers.get(header);
  if (url === null) return undefined;
  const options: CallbackOptions = { url: httpUrl(header, url) };
  const opt = (suffix: string) => headers.get(`${header}-${suffix}`);
  const m = opt("Method");
  if (m !== null) options.method = method(`${header}-Method`, m);
  const r = opt("Retries");
  if (r !== null) options.retries = integer(`${header}-Retries`, r, 0, MAX_RETRIES);
  const t = opt("Timeout");
  if (t !== null) options.timeoutMs = durationHeader(`${header}-Timeout`, t, 1_000, 900_000);
  const d = opt("Delay");
  if (d !== null) options.delayMs = delayHeader(`${header}-Delay`, d);
  const fwd = forwarded(headers, `${header.toLowerCase()}-forward-`);
  if (Object.keys(fwd).length > 0) options.headers = fwd;
  return options;
}

/** Upstash-Not-Before: unix seconds, at most MAX_DELAY_DAYS from now (a time past is now). */
function notBeforeHeader(text: string, nowMs: number): number {
  const latest = Math.floor((nowMs + MAX_DELAY_MS) / 1000);
  const seconds = integer("Upstash-Not-Before", text, 0, Number.MAX_SAFE_INTEGER);
  if (seconds > latest) {
    throw new QstashInputError(
      "Upstash-Not-Before",
      `${seconds} is too far ahead: a message may be due at most ${MAX_DELAY_DAYS}d from now (unix seconds up to ${latest})`,
    );
  }
  return seconds * 1000;
}

export function parseMessageHeaders(headers: HeaderSource, nowMs: number): MessageOptions {
  const get = (name: string) => headers.get(name);
  const m = get("Upstash-Method");
  const delay = get("Upstash-Delay");
  const delayMs = delay === null ? 0 : delayHeader("Upstash-Delay", delay);
  const notBefore = get("Upstash-Not-Before");
  const notBeforeMs = notBefore === null ? nowMs + delayMs : notBeforeHeader(notBefore, nowMs);
  const retries = get("Upstash-Retries");
  const retryDelay = get("Upstash-Retry-Delay");
  const timeout = get("Upstash-Timeout");
  const dedup = get("Upstash-Deduplication-Id");
  if (dedup !== null && (dedup.length === 0 || dedup.length > 200)) {
    throw new QstashInputError("Upstash-Deduplication-Id", "must be 1 to 200 characters");
  }
  const contentBased = get("Upstash-Content-Based-Deduplication");
  const label = get("Upstash-Label");
  if (label !== null && label.length > 200) throw new QstashInputError("Upstash-Label", "must be at most 200 characters");
  const queueName = get("Upstash-Queue-Name");
  const scheduleId = get("Upstash-Schedule-Id");
  if (scheduleId !== null && !/^[A-Za-z0-9_.-]{1,100}$/.test(scheduleId)) {
    throw new QstashInputError("Upstash-Schedule-Id", "1 to 100 letters, digits, _ . or -");
  }
  const cron = get("Upstash-Cron");
  const out: MessageOptions = {
    method: m === null ? "POST" : method("Upstash-Method", m),
    notBeforeMs,
    delayMs,
    retries: retries === null ? DEFAULT_RETRIES : integer("Upstash-Retries", retries, 0, MAX_RETRIES),
    contentBasedDeduplication: contentBased !== null && contentBased.trim().toLowerCase() === "true",
    headers: forwarded(headers, "upstash-forward-"),
  };
  const contentType = get("Content-Type");
  if (contentType !== null) out.headers["Content-Type"] = contentType;
  if (retryDelay !== null) out.retryDelay = checkRetryDelay(retryDelay);
  if (timeout !== null) out.timeoutMs = durationHeader("Upstash-Timeout", timeout, 1_000, 900_000);
  const callback = callbackOf(headers, "Upstash-Callback");
  if (callback) out.callback = callback;
  const failureCallback = callbackOf(headers, "Upstash-Failure-Callback");
  if (failureCallback) out.failureCallback = failureCallback;
  if (dedup !== null) out.deduplicationId = dedup;
  if (label !== null && label !== "") out.label = label;
  const flowControl = parseFlowControl(get("Upstash-Flow-Control-Key"), get("Upstash-Flow-Control-Value"));
  if (flowControl) out.flowControl = flowControl;
  if (queueName !== null) out.queueName = queueName;
  if (scheduleId !== null) out.scheduleId = scheduleId;
  if (cron !== null) out.cron = cron;
  return out;
}
